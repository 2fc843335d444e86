---------------------- MODULE Membership_TwoRegistrars ----------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Two members allocate ids at the same time, each the  *)
(* smallest id its own view has not used: two joiners through different    *)
(* members receive the same id.  Membership_TwoRegistrars.cfg sets          *)
(* Registrars = {a, b}; TLC must report UniqueIds violated.                 *)
(***************************************************************************)
EXTENDS Membership
=============================================================================
