------------------- MODULE LocalRecovery_ReplayBelowWalStart -------------------
(***************************************************************************)
(* DESIGN 4.4 AS WRITTEN (finding F3 in docs/design/FINDINGS.md): "WAL     *)
(* ahead: replay".  After WAL segments were collected, an OS crash can     *)
(* take SQLite (synchronous=NORMAL) back below the WAL's start; replaying  *)
(* from there is impossible (Wal.read_from raises RowsUnavailable) and the *)
(* member refuses to start although a checkpoint would do.                 *)
(* LocalRecovery_ReplayBelowWalStart.cfg replaces ReplayFrom with          *)
(* ReplayWhenNotAhead; TLC must report StartAlwaysPossible violated.       *)
(***************************************************************************)
EXTENDS LocalRecovery

ReplayWhenNotAhead(v) == v <= Len(wal)
=============================================================================
