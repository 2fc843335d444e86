--------------------- MODULE QuorumParallel_NoReadCheck ---------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  A member refuses only on another transaction's       *)
(* intent or a fence, as the one-line rule says, not on a row it applied  *)
(* that the coordinator had not read.  Once the first transaction's row is *)
(* applied its intents are gone, and a second coordinator that read the   *)
(* old version gathers a majority: a lost update.                         *)
(* QuorumParallel_NoReadCheck.cfg replaces StaleRead; TLC must report      *)
(* NoLostUpdate violated.                                                  *)
(***************************************************************************)
EXTENDS QuorumParallel

NeverStale(m, t) == FALSE
=============================================================================
