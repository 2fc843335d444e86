------------------------ MODULE TombstonePurge_HorizonWait ------------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Two phases, but the next epoch waits for the         *)
(* horizon's components (what every member holds of each origin) instead   *)
(* of each member's own LSN in its acknowledgement: a member's rows older  *)
(* than the tombstone that no other member holds yet are above the         *)
(* horizon, and the purge does not wait for them.                          *)
(* TombstonePurge_HorizonWait.cfg replaces NextWaitFor with                *)
(* HorizonWaitFor; TLC must report NoResurrection violated.                *)
(***************************************************************************)
EXTENDS TombstonePurge

HorizonWaitFor(p, H) == H
=============================================================================
