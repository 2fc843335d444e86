----------------------- MODULE QuorumCommit_LiveQuorum -----------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  Marmot's original rule: success is counted against   *)
(* the members the coordinator believes alive.  A partitioned coordinator *)
(* that sees only itself commits alone; so can one on the other side.      *)
(* QuorumCommit_LiveQuorum.cfg replaces HasQuorum with HasLiveQuorum; TLC  *)
(* must report QuorumOnTotal violated, and with                            *)
(* QuorumCommit_LiveQuorum_LostUpdate.cfg, NoLostUpdate.                   *)
(***************************************************************************)
EXTENDS QuorumCommit

(* Some view of the live members (the failure detector can be wrong) that  *)
(* holds the coordinator and the voters, and a majority of that view.     *)
HasLiveQuorum(c, v) ==
    \E live \in SUBSET Members :
        c \in live /\ v \subseteq live /\ Cardinality(v) >= Cardinality(live) \div 2 + 1
=============================================================================
