----------------------- MODULE VClockReplication_GiveUp -----------------------
(***************************************************************************)
(* The recovery fetch as the code runs it: relays ship their own member's  *)
(* rows once durable (ShipDurableOnly), no member fences an old            *)
(* incarnation, and a member restarted after an unclean stop under "write" *)
(* fetches its own rows back but may stop waiting for a peer whose link    *)
(* failed before it answered (RecoveryGiveUp), then takes writes.          *)
(* VClockReplication_GiveUp.cfg must pass, in the shape where              *)
(* VClockReplication_GiveUpUnguarded (the same without ShipDurableOnly)    *)
(* breaks Agreement.                                                       *)
(***************************************************************************)
EXTENDS VClockReplication

CodeHasNoFence(p, r) == FALSE

(* With no fence refusing anything, raising one changes nothing else: the  *)
(* configuration leaves those steps out (fewer states, same behaviours of  *)
(* every other variable).                                                  *)
NothingToRaise(p, m) == FALSE
=============================================================================
