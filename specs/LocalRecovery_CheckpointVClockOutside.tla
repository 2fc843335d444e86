----------------- MODULE LocalRecovery_CheckpointVClockOutside -----------------
(***************************************************************************)
(* WRONG ON PURPOSE.  The checkpoint's vclock is taken from the writer's   *)
(* memory (the pending vclock, which counts the open batch) instead of the *)
(* _rs_vclock table inside the copied file: a rebuild from it skips the    *)
(* rows between the two.                                                   *)
(* LocalRecovery_CheckpointVClockOutside.cfg replaces CheckpointVClock     *)
(* with PendingVClock; TLC must report RecoveredEqualsCheckpointPlusWal    *)
(* violated.                                                               *)
(***************************************************************************)
EXTENDS LocalRecovery

PendingVClock == Len(db) + Len(batch)
=============================================================================
