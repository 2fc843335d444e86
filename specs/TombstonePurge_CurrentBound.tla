------------------------ MODULE TombstonePurge_CurrentBound ------------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Two phases, but the second purges under the horizon  *)
(* of the pass that ends the epoch instead of the bound the epoch started  *)
(* with: a tombstone that reached every member after the epoch started has *)
(* no member's own LSN in waitFor taken after that member applied it, so   *)
(* waitFor does not bound the rows older than it.                          *)
(* TombstonePurge_CurrentBound.cfg replaces PurgeBound with                *)
(* CurrentHorizon; TLC must report NoResurrection violated.                *)
(***************************************************************************)
EXTENDS TombstonePurge

CurrentHorizon(p, H) == H
=============================================================================
