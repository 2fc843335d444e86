-------------------- MODULE VClockReplication_ShipDurable --------------------
(***************************************************************************)
(* The cure for finding F1 that the code uses, checked without the other  *)
(* one: relays ship only rows their sender made durable (ShipDurableOnly), *)
(* no member fences an old incarnation, and a member restarted after an OS *)
(* crash under "write" takes writes at once, without fetching its own rows *)
(* back.  No member ever holds a row its origin can lose, so an LSN reused *)
(* after the crash names a row nobody else has: Agreement holds.          *)
(* VClockReplication_ShipDurable.cfg must pass.                            *)
(***************************************************************************)
EXTENDS VClockReplication

NoFence(p, r) == FALSE
RestartTakingWrites == "active"
=============================================================================
