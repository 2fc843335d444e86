------------------------- MODULE Membership_NoWait -------------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  The registrar starts a change without waiting for    *)
(* the previous one to reach the members: a lagging member's view is two   *)
(* changes old, and a majority of it misses a majority of the current one.*)
(* Membership_NoWait.cfg replaces PreviousChangeHeld with NoWait; TLC must *)
(* report QuorumsIntersect violated.                                       *)
(***************************************************************************)
EXTENDS Membership

NoWait(r, next, j) == TRUE
=============================================================================
