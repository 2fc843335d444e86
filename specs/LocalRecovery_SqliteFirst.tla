----------------------- MODULE LocalRecovery_SqliteFirst -----------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Engine.flush commits SQLite first, answers the       *)
(* clients, and writes the WAL afterwards.  A crash between the two leaves *)
(* SQLite ahead of the WAL; the start rebuilds from the checkpoint and the *)
(* WAL and the answered transaction is gone.                               *)
(* LocalRecovery_SqliteFirst.cfg replaces WalFirst with SqliteFirst; TLC   *)
(* must report NoAckedWriteLost violated.                                  *)
(***************************************************************************)
EXTENDS LocalRecovery

SqliteFirst == FALSE
=============================================================================
