------------------------ MODULE QuorumRemoval_WaitForLearned ------------------------
(***************************************************************************)
(* The code before the learned-COMMIT fix: a participant that learned      *)
(* COMMIT from the coordinator without the row never resolves by the rule *)
(* and waits for the row.  The fault harness found it: the removed         *)
(* coordinator decided COMMIT, answered a participant's QueryDecision, and *)
(* died (or was cut off) before its row reached any remaining member; the  *)
(* participant held the intent for good, so R2 refused every later         *)
(* membership change.                                                      *)
(* QuorumRemoval_WaitForLearned.cfg replaces MayResolveAbort with          *)
(* WaitForLearned, and Terminated with Idle (the stuck state would be      *)
(* reported as a deadlock first, as in QuorumRemoval_NoRule); TLC must     *)
(* report RemovedTxnsResolved violated.                                    *)
(***************************************************************************)
EXTENDS QuorumRemoval

WaitForLearned(p, t) == View(p) \subseteq noRow[p][t] /\ t \notin learned[p]

Idle == UNCHANGED vars
=============================================================================
