--------------------- MODULE MembershipQuorum_NoBarrier ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Without R2 a member votes a membership change while  *)
(* it holds a transaction of an older view undecided: the view grows twice *)
(* under it, and a quorum of the newest view that misses its voters        *)
(* commits from the same version.  MembershipQuorum_NoBarrier.cfg replaces *)
(* NoPendingFromOtherView with AnyPending; TLC must report NoLostUpdate    *)
(* violated.                                                               *)
(***************************************************************************)
EXTENDS MembershipQuorum

AnyPending(m) == TRUE
=============================================================================
