------------------- MODULE VClockReplication_GiveUpUnguarded -------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  A recovering member stops waiting for a peer that   *)
(* has not answered (RecoveryGiveUp) although relays ship rows as soon as  *)
(* they are written (ShipDurableOnly = FALSE): the peer it gave up on may  *)
(* hold a row of its origin that an OS crash took from its WAL, and the   *)
(* member writes another row at that LSN.  Fences do not help: the peer   *)
(* never answered, so it raised none.  Its configuration replaces        *)
(* GiveUpSafe with GiveUpAnyway; TLC must report Agreement violated.       *)
(***************************************************************************)
EXTENDS VClockReplication

GiveUpAnyway == TRUE
=============================================================================
