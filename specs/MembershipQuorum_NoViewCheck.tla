-------------------- MODULE MembershipQuorum_NoViewCheck --------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Without R1 a participant answers PREPARED whatever   *)
(* member set the PREPARE carries.  A member votes the next membership     *)
(* change (R2 finds nothing pending), then a transaction of the view it is *)
(* leaving: that transaction's quorum of the old view and a quorum of the  *)
(* view two changes later miss each other, and both commit from the same  *)
(* version.  MembershipQuorum_NoViewCheck.cfg replaces ViewCheck with      *)
(* NoViewCheck; TLC must report NoLostUpdate violated.                     *)
(***************************************************************************)
EXTENDS MembershipQuorum

NoViewCheck(m, t) == TRUE
=============================================================================
