------------------------- MODULE QuorumCommitTrace -------------------------
(***************************************************************************)
(* Trace validation of the quorum transaction cores against QuorumCommit,  *)
(* as VClockReplicationTrace does for replication: the deterministic       *)
(* simulator (replicaset/sim.py) runs real engines, metastores and the     *)
(* member driver the server runs; the driver logs the spec's actions it    *)
(* carries (Begin, Prepare, DecideCommit, DecideAbort, QueryDecision,      *)
(* ParticipantAbort, ApplierReceive, and WriteOne as the LocalWrite of a   *)
(* ONE row) and the simulator the environment's (Crash, Restart).          *)
(* specs/check_trace.py --spec QuorumCommit turns the log into TraceLog.   *)
(*                                                                         *)
(* Line l must be the spec's action of the same name with the line's       *)
(* parameters, and the implementation's observations must be the spec's:  *)
(* the version a Begin read, the LSN and stamp of a decided row or a ONE   *)
(* write, the (origin, lsn) an applier applied (exactly the next: a row    *)
(* applied twice is no step).  Stamps are ranks among the trace's stamps   *)
(* (0 is no version), so the stamp-taking actions are the spec's           *)
(* parameterised ones (WriteOneAt, DecideCommitAt).                        *)
(*                                                                         *)
(* One refinement, for what the spec makes atomic: a PREPARE is a message, *)
(* and one still on its way when the coordinator decides (on a quorum of   *)
(* the others, at its deadline) is handled after the decision.  It places  *)
(* an intent under the same rule as Prepare, and no vote counts it         *)
(* (LatePrepare); the ABORT, the row or an answer to a question releases   *)
(* it as for any intent.  The spec's invariants are checked on every      *)
(* state of the trace.                                                     *)
(***************************************************************************)
EXTENDS QuorumCommit

CONSTANT TraceLog    \* <<[event |-> "Begin", member |-> 1, txn |-> "t1", ...], ...>>

VARIABLE l           \* the next line of TraceLog to match

traceVars == <<vars, l>>

(* TLC evaluates a constant-level definition once: read the log here. *)
TheLog == TraceLog

Line == TheLog[l]

(* A PREPARE handled after its transaction was decided: the intent goes in *)
(* under Prepare's rule, and no vote counts it.                            *)
LatePrepare(p, t) ==
    /\ Begun(t) /\ decision[t] # "none" /\ Up(p)
    /\ t \notin aborted[p]
    /\ LET k == txn[t].key
       IN /\ intent[p][k] = NoTxn
          /\ stored[p][k] = txn[t].read
          /\ intent' = [intent EXCEPT ![p][k] = t]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, votes, decision, decidedWith, aborted,
                   ones, crashes>>

(* The row the line names is the one the action appended to its member's WAL. *)
Wrote(m) == Len(rows'[m]) = Line.lsn /\ rows'[m][Line.lsn].hlc = Line.hlc

Step ==
    CASE Line.event = "Begin" ->
            /\ Begin(Line.txn, Line.member, Line.key)
            /\ txn'[Line.txn].read = [hlc |-> Line.hlc, origin |-> Line.origin]
      [] Line.event = "Prepare" -> Prepare(Line.member, Line.txn) \/ LatePrepare(Line.member, Line.txn)
      [] Line.event = "DecideCommit" ->
            /\ Coord(Line.txn) = Line.member
            /\ DecideCommitAt(Line.txn, Line.hlc)
            /\ Wrote(Line.member)
      [] Line.event = "DecideAbort" -> Coord(Line.txn) = Line.member /\ DecideAbort(Line.txn)
      [] Line.event = "QueryDecision" -> QueryDecision(Line.member, Line.txn)
      [] Line.event = "ParticipantAbort" -> ParticipantAbort(Line.member, Line.txn)
      [] Line.event = "ApplierReceive" ->
            /\ ApplierReceive(Line.member, Line.origin)
            /\ vclock'[Line.member][Line.origin] = Line.lsn
      [] Line.event = "WriteOne" -> WriteOneAt(Line.member, Line.key, Line.hlc) /\ Wrote(Line.member)
      [] Line.event = "Crash" -> Crash(Line.member)
      [] Line.event = "Restart" -> Restart(Line.member)
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

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

=============================================================================
