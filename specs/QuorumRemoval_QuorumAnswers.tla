----------------------- MODULE QuorumRemoval_QuorumAnswers -----------------------
(***************************************************************************)
(* Wrong: a participant aborts once a quorum of its view (floor(n / 2) + 1 *)
(* of the remaining members), not every member, answered "no row".  The    *)
(* row is at a member that did not answer.  Needs four members, so that    *)
(* the view after the removal has a quorum smaller than itself.            *)
(* QuorumRemoval_QuorumAnswers.cfg replaces MayResolveAbort with           *)
(* QuorumOfNoRow; TLC must report NoSplitDecision violated.               *)
(***************************************************************************)
EXTENDS QuorumRemoval

QuorumOfNoRow(p, t) == Cardinality(noRow[p][t] \cap View(p)) >= Quorum(View(p))
=============================================================================
