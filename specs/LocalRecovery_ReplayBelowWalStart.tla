------------------- MODULE LocalRecovery_ReplayBelowWalStart -------------------
(***************************************************************************)
(* The start rule as first written (finding F3 in docs/design/FINDINGS.md; *)
(* docs/design/README.md §4.4 holds the corrected one): "WAL ahead:        *)
(* replay".  After WAL segments were collected, an OS crash can take       *)
(* SQLite (synchronous=NORMAL) back below the WAL's start; replaying from  *)
(* there is impossible (Wal.read_from raises RowsUnavailable) and the      *)
(* member refuses to start although a checkpoint would do.                 *)
(* LocalRecovery_ReplayBelowWalStart.cfg replaces ReplayFrom with          *)
(* ReplayWhenNotAhead; TLC must report StartAlwaysPossible violated.       *)
(***************************************************************************)
EXTENDS LocalRecovery

ReplayWhenNotAhead(v) == v <= Len(wal)
=============================================================================
