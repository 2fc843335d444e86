------------------- MODULE QuorumParallel_DeadlineAbortNoFence -------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  At the client's deadline the coordinator aborts     *)
(* without fencing and without a refusing majority.  PREPAREs still in    *)
(* flight land afterwards, their slots reach a majority, and the          *)
(* transaction is committed by the rule while it was aborted.             *)
(* QuorumParallel_DeadlineAbortNoFence.cfg replaces ExtraAbort; TLC must   *)
(* report NoSplitDecision violated.                                        *)
(***************************************************************************)
EXTENDS QuorumParallel

(* Only the coordinator has a deadline; it gives up on whatever is missing. *)
DeadlineAbort(t) == \E c \in Members : c = Coord(t) /\ Up(c) /\ ~ImplicitCommit(t)
=============================================================================
