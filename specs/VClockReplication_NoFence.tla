----------------------- MODULE VClockReplication_NoFence -----------------------
(***************************************************************************)
(* The recovery fetch as first written (finding F1 in                      *)
(* docs/design/FINDINGS.md; docs/design/README.md §4.3 holds the rule the  *)
(* code follows).  The recovering member fetches its own rows from every   *)
(* peer and waits for all of them, but the peers do not fence the crashed  *)
(* incarnation: a row that was still in flight from it reaches a peer      *)
(* after that peer answered, and the recovered member writes another row   *)
(* at the same LSN.  VClockReplication_NoFence.cfg replaces Fenced with    *)
(* NeverFenced; TLC must report Agreement violated.                        *)
(***************************************************************************)
EXTENDS VClockReplication

NeverFenced(p, r) == FALSE
=============================================================================
