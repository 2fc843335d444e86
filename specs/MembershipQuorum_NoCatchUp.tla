--------------------- MODULE MembershipQuorum_NoCatchUp ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Without R3 a joiner votes as soon as it has its      *)
(* registrar's snapshot.  A row committed by a quorum of an old view, held *)
(* by a voter of the registration but not yet by the registrar, is missing *)
(* from the joiner's snapshot; the joiner and the registrar make a quorum  *)
(* of the new view and commit from the version that row replaced.          *)
(* MembershipQuorum_NoCatchUp.cfg replaces CaughtUp with NotCaughtUp; TLC  *)
(* must report NoLostUpdate violated.                                      *)
(***************************************************************************)
EXTENDS MembershipQuorum

NotCaughtUp(m) == TRUE
=============================================================================
