--------------------- MODULE QuorumRemoval_AnswerBeforeApplied ---------------------
(***************************************************************************)
(* Wrong: a member answers "no row" before it has applied the removal,     *)
(* while it still follows the removed coordinator: a row in flight from    *)
(* Removed reaches it after its answer.                                    *)
(* QuorumRemoval_AnswerBeforeApplied.cfg replaces MayAnswerNoRow with      *)
(* AnswerAnyTime; TLC must report NoSplitDecision violated.               *)
(***************************************************************************)
EXTENDS QuorumRemoval

AnswerAnyTime(q, p, t) == TRUE
=============================================================================
