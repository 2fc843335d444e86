---------------------- MODULE VClockReplication_LsnReuse ----------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  A member restarted after an OS crash under "write"   *)
(* takes writes at once instead of recovering its own rows from its peers  *)
(* first: it reuses an LSN a peer already holds with another row.          *)
(* VClockReplication_LsnReuse.cfg replaces AfterRestart with               *)
(* RestartTakingWrites; TLC must report Agreement violated.                *)
(***************************************************************************)
EXTENDS VClockReplication

RestartTakingWrites == "active"
=============================================================================
