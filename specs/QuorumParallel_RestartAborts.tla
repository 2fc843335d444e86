--------------------- MODULE QuorumParallel_RestartAborts ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  QuorumCommit's restart rule carried over: a          *)
(* restarted coordinator aborts every transaction of its own that has no  *)
(* row yet, as if its votes had been in memory.  Here the outcome may      *)
(* already be implicit in durable slots (and acked): the abort splits it. *)
(* QuorumParallel_RestartAborts.cfg replaces OnRestart; TLC must report    *)
(* NoSplitDecision violated.                                               *)
(***************************************************************************)
EXTENDS QuorumParallel

RestartAbortsAll(m) ==
    LET mine == {t \in Txns : Begun(t) /\ Coord(t) = m /\ t \notin Range(rows[m])
                               /\ decision[t] # "abort"}
    IN /\ decision' = [t \in Txns |-> IF t \in mine THEN "abort" ELSE decision[t]]
       /\ UNCHANGED <<txn, slot, applied, rows, durableLen, acked, token, fences>>
=============================================================================
