--------------------- MODULE QuorumParallel_ReusableToken ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  The client is told its row's LSN as soon as the row  *)
(* is written, before the WAL fsync.  A crash drops the row; the          *)
(* rewritten row (or another transaction's) takes that LSN or a later     *)
(* one, and the LSN the client holds names something else or nothing.    *)
(* QuorumParallel_ReusableToken.cfg replaces TokenPositions; TLC must      *)
(* report AckedTokenHeld violated.                                         *)
(***************************************************************************)
EXTENDS QuorumParallel

TokenAnyPosition(c) == DOMAIN rows[c]
=============================================================================
