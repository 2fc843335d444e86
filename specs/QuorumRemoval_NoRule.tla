---------------------------- MODULE QuorumRemoval_NoRule ----------------------------
(***************************************************************************)
(* The code today (docs/reliability.md finding 4): no rule for a removed   *)
(* coordinator.  A participant only asks the coordinator, and learns the  *)
(* outcome from it or from a member that holds its row; with the          *)
(* coordinator killed and removed before deciding, nobody answers and the *)
(* intent is held forever, so R2 refuses every later membership change.   *)
(* QuorumRemoval_NoRule.cfg replaces MayResolveAbort with NeverAbort, and  *)
(* Terminated with Idle (the stuck state would be reported as a deadlock   *)
(* first; TLC 2.15's cfg has no CHECK_DEADLOCK); TLC must report          *)
(* RemovedTxnsResolved violated.                                           *)
(***************************************************************************)
EXTENDS QuorumRemoval

NeverAbort(p, t) == FALSE

Idle == UNCHANGED vars
=============================================================================
