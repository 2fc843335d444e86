----------------------- MODULE VClockReplicationTrace -----------------------
(***************************************************************************)
(* Trace validation of the replication core against VClockReplication, in  *)
(* the manner of etcd-io/raft: the deterministic simulator (replicaset/    *)
(* sim.py) runs real engines and the relay and applier cores and logs each *)
(* step as one of the spec's actions with its parameters.                  *)
(* specs/check_trace.py turns that log into the sequence TraceLog and asks *)
(* TLC whether some behaviour of the spec takes exactly those steps.       *)
(*                                                                         *)
(* Line l of the trace must be the spec's action of the same name, taken   *)
(* with the line's parameters, and the implementation's observations on    *)
(* the line must equal the spec's state after it: the LSN a local write    *)
(* took, the (origin, lsn) an applier applied (exactly the next one: a    *)
(* second application of a row is no step of the spec), and the member's  *)
(* vclock after a WAL flush or a restart.  The spec's own nondeterminism    *)
(* stays free (how much of the WAL an OS crash kept is found by the vclock *)
(* at the following Restart), and FenceRaise, which the implementation     *)
(* does not log, may happen between any two lines.                         *)
(*                                                                         *)
(* The spec's invariants are checked on every state of the trace.  TLC    *)
(* prints "matched" with the line number each time a behaviour gets a line *)
(* further; the trace is accepted when the last line is matched.           *)
(***************************************************************************)
EXTENDS VClockReplication

CONSTANT TraceLog    \* <<[event |-> "LocalWrite", member |-> 1, ...], ...>>

VARIABLE l           \* the next line of TraceLog to match

traceVars == <<vars, l>>

Line == TraceLog[l]

ApplierApplied(p, o, lsn) ==
    /\ pending[p][o] = lsn - 1
    /\ pending'[p][o] = lsn

Step ==
    CASE Line.event = "LocalWrite" ->
            /\ LocalWrite(Line.member, Line.ops)
            /\ pending'[Line.member][Line.member] = Line.lsn
      [] Line.event = "WalFlush" ->
            /\ WalFlush(Line.member)
            /\ vclock'[Line.member] = Line.vclock
      [] Line.event = "WalSync" -> WalSync(Line.member)
      [] Line.event = "RelaySend" ->
            /\ RelaySend(Line.peer, Line.member, Line.origin)
            /\ \E msg \in net' \ net : msg.row.lsn = Line.lsn
      [] Line.event = "ApplierReceive" ->
            /\ ApplierReceive(Line.member)
            /\ ApplierApplied(Line.member, Line.origin, Line.lsn)
      [] Line.event = "RecoveryAnswer" -> RecoveryAnswer(Line.peer, Line.member)
      [] Line.event = "RecoveryFinish" -> RecoveryFinish(Line.member)
      [] Line.event = "Crash" -> Crash(Line.member) \/ OsCrash(Line.member)
      [] Line.event = "Restart" ->
            /\ Restart(Line.member)
            /\ vclock'[Line.member] = Line.vclock
      [] OTHER -> FALSE

(* Record the furthest line any behaviour matched, and say so once. *)
Matched ==
    IF l > TLCGet(1) THEN TLCSet(1, l) /\ PrintT(<<"matched", l>>) ELSE TRUE

TraceInit ==
    /\ Init
    /\ l = 1
    /\ TLCSet(1, 0)

TraceNext ==
    \/ /\ l <= Len(TraceLog)
       /\ Step
       /\ l' = l + 1
       /\ Matched
    \/ /\ \E p, m \in Members : FenceRaise(p, m)
       /\ UNCHANGED l

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

=============================================================================
