------------------------- MODULE TombstonePurge_OneHorizon -------------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  The naive rule: a member purges a tombstone as soon  *)
(* as every member holds the row that wrote it (the row is under the       *)
(* set-wide horizon of the pass), with no second phase.  A member that     *)
(* wrote an older row of the key before it applied the delete may still    *)
(* have that row on its way to the purging member, which then applies it   *)
(* with no version left to refuse it.  TombstonePurge_OneHorizon.cfg       *)
(* replaces EpochDone with NoWait and PurgeBound with CurrentHorizon; TLC  *)
(* must report NoResurrection violated.                                    *)
(***************************************************************************)
EXTENDS TombstonePurge

NoWait(p, H) == TRUE
CurrentHorizon(p, H) == H
=============================================================================
