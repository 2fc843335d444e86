--------------------- MODULE MembershipQuorum_Registrar ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE: the current design.  One registrar registers joiners  *)
(* (R4 holds trivially), and participants know nothing of views: no view  *)
(* check, no barrier, no catch-up.  A data transaction undecided across   *)
(* two joins, or decided but not yet replicated to the registrar, loses an *)
(* update.  MembershipQuorum_Registrar.cfg sets Registrars to one member  *)
(* and replaces R1-R3; TLC must report NoLostUpdate violated.             *)
(***************************************************************************)
EXTENDS MembershipQuorum

NoViewCheck(m, t) == TRUE
AnyPending(m) == TRUE
NotCaughtUp(m) == TRUE
=============================================================================
