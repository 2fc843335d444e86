--------------------- MODULE QuorumRemoval_AnswerBeforeStopped ---------------------
(***************************************************************************)
(* Wrong: a member answers "no row" once it has applied the removal, before *)
(* it has stopped following the removed coordinator.  In the code the two  *)
(* are one _cluster poll apart (runtime/node.py, _notice_removals), and a  *)
(* row of Removed taken before may still wait for the writer.             *)
(* QuorumRemoval_AnswerBeforeStopped.cfg replaces MayAnswerNoRow with      *)
(* AnswerOnceApplied; TLC must report NoSplitDecision violated.           *)
(***************************************************************************)
EXTENDS QuorumRemoval

AnswerOnceApplied(q, p, t) == q \in applier
=============================================================================
