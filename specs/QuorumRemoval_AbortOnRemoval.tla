------------------------ MODULE QuorumRemoval_AbortOnRemoval ------------------------
(***************************************************************************)
(* Wrong: a participant aborts a pending transaction of the removed        *)
(* coordinator as soon as it has applied the removal, asking nobody.       *)
(* Removed committed and its row reached another remaining member first.  *)
(* QuorumRemoval_AbortOnRemoval.cfg replaces MayResolveAbort with          *)
(* AbortOnRemoval; TLC must report NoSplitDecision violated.              *)
(***************************************************************************)
EXTENDS QuorumRemoval

AbortOnRemoval(p, t) == TRUE
=============================================================================
