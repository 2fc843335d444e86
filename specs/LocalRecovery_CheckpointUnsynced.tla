------------------- MODULE LocalRecovery_CheckpointUnsynced -------------------
(***************************************************************************)
(* THE CODE AS IT IS (finding F2 in docs/design/FINDINGS.md).  Under       *)
(* wal_mode = write a checkpoint copies committed rows whose WAL records   *)
(* are written but not fsynced.  An OS crash cuts them from the WAL, the   *)
(* LSNs are used again by new transactions, and the stale checkpoint (the  *)
(* WAL now reaches its vclock) is what the next rebuild starts from.       *)
(* LocalRecovery_CheckpointUnsynced.cfg replaces SyncWalBeforeCheckpoint   *)
(* with NoSync; TLC must report RecoveredEqualsCheckpointPlusWal violated. *)
(***************************************************************************)
EXTENDS LocalRecovery

NoSync == FALSE
=============================================================================
