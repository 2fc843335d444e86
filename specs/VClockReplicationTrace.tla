----------------------- MODULE VClockReplicationTrace -----------------------
(***************************************************************************)
(* Trace validation of the replication core against VClockReplication, in  *)
(* the manner of etcd-io/raft: the deterministic simulator (replicaset/    *)
(* sim.py) runs real engines and the member driver the server runs         *)
(* (replicaset/member/), and logs each step as one of the spec's actions   *)
(* with its parameters.                                                    *)
(* specs/check_trace.py turns that log into the sequence TraceLog and asks *)
(* TLC whether some behaviour of the spec takes exactly those steps.       *)
(*                                                                         *)
(* Line l of the trace must be the spec's action of the same name, taken   *)
(* with the line's parameters, and the implementation's observations on    *)
(* the line must equal the spec's state after it: the LSN a local write    *)
(* took, the (origin, lsn) an applier applied (exactly the next one: a    *)
(* second application of a row is no step of the spec) and what that row  *)
(* changes, and the member's vclock and table after a WAL flush or a       *)
(* restart.  A value is an id of the image a row wrote (a digest of its    *)
(* columns), and a stamp is the rank of the implementation's HLC stamp     *)
(* among all stamps of the trace, so the table a member holds, versions   *)
(* included, is compared with the spec's last-writer-wins result.  The    *)
(* spec's own nondeterminism stays free (how much of the WAL an OS crash  *)
(* kept is found by the vclock at the following Restart).  The spec is    *)
(* taken as the code implements it: ShipDurableOnly, and no fences.       *)
(* ShipDurableOnly also enables RecoveryGiveUp (GiveUpSafe): a recovering *)
(* member that stops waiting for a peer whose link failed before it       *)
(* answered is a step of the spec, logged once per peer and recovery.    *)
(*                                                                         *)
(* The spec's invariants are checked on every state of the trace.  TLC    *)
(* prints "matched" with the line number each time a behaviour gets a line *)
(* further; the trace is accepted when the last line is matched.           *)
(***************************************************************************)
EXTENDS VClockReplication

CONSTANT TraceLog    \* <<[event |-> "LocalWrite", member |-> 1, ...], ...>>

VARIABLE l           \* the next line of TraceLog to match

traceVars == <<vars, l>>

(* TLC evaluates a constant-level definition once, but the constant that  *)
(* the configuration binds to the log literal at every use: read it here.  *)
TheLog == TraceLog

Line == TheLog[l]

(* The applier queued row o:lsn (ApplyQueued), and it changes what the   *)
(* implementation applied: a row with another row's payload is no step.   *)
ApplierApplied(p, o, lsn, ops) ==
    /\ pending[p][o] = lsn - 1
    /\ pending'[p][o] = lsn
    /\ batch'[p] # <<>>
    /\ batch'[p][Len(batch'[p])].ops = ops

(* Every key the line lists holds that version and value (or tombstone). *)
TableSeen(m) == \A k \in DOMAIN Line.table : tbl'[m][k] = Line.table[k]

Step ==
    CASE Line.event = "LocalWrite" ->
            /\ LocalWriteAt(Line.member, Line.ops, Line.hlc)
            /\ pending'[Line.member][Line.member] = Line.lsn
      [] Line.event = "WalFlush" ->
            /\ WalFlush(Line.member)
            /\ vclock'[Line.member] = Line.vclock
            /\ TableSeen(Line.member)
      [] Line.event = "WalSync" -> WalSync(Line.member)
      [] Line.event = "RelaySend" ->
            /\ RelaySend(Line.peer, Line.member, Line.origin)
            /\ \E msg \in net' \ net : msg.row.lsn = Line.lsn
      [] Line.event = "ApplierReceive" ->
            /\ ApplierReceive(Line.member)
            /\ ApplierApplied(Line.member, Line.origin, Line.lsn, Line.ops)
      [] Line.event = "RecoveryAnswer" -> RecoveryAnswer(Line.peer, Line.member)
      [] Line.event = "RecoveryGiveUp" -> RecoveryGiveUp(Line.peer, Line.member)
      [] Line.event = "RecoveryFinish" -> RecoveryFinish(Line.member)
      [] Line.event = "Crash" -> Crash(Line.member) \/ OsCrash(Line.member)
      [] Line.event = "Restart" ->
            /\ Restart(Line.member)
            /\ vclock'[Line.member] = Line.vclock
            /\ TableSeen(Line.member)
      [] OTHER -> FALSE

(* Record the furthest line any behaviour matched, and say so once. *)
Matched ==
    IF l > TLCGet(1) THEN TLCSet(1, l) /\ PrintT(<<"matched", l>>) ELSE TRUE

TraceInit ==
    /\ Init
    /\ l = 1
    /\ TLCSet(1, 0)

TraceNext ==
    /\ l <= Len(TheLog)
    /\ Step
    /\ l' = l + 1
    /\ Matched

(* The code has no fences: relays ship their own rows only once durable   *)
(* (ShipDurableOnly), which needs none (FINDINGS F1, and                  *)
(* VClockReplication_ShipDurable checks it).  Traces are checked without  *)
(* them: with them, a peer would have to refuse a durable row of a         *)
(* recovering member's old incarnation that the code rightly applies.     *)
TraceNoFence(p, r) == FALSE

(* Symmetry is a constant TLC computes at start; the permutations of the  *)
(* trace's values (one per image written) would take minutes, and a trace *)
(* check does not use symmetry.                                            *)
TraceSymmetry == {}

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

=============================================================================
