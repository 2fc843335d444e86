-------------------- MODULE Swim_EqualIncarnationAlive --------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  ALIVE is taken at an equal incarnation over SUSPECT  *)
(* or DEAD ("any message proves it alive"): a datagram sent before the     *)
(* suspicion, delivered after it, erases a suspicion its subject never     *)
(* refuted, and a member that is really gone comes back.                   *)
(* Swim_EqualIncarnationAlive.cfg replaces Wins with WinsAliveAtEqual; TLC *)
(* must report NoStaleRevival violated.                                    *)
(***************************************************************************)
EXTENDS Swim

WinsAliveAtEqual(held, u) ==
    /\ held.st # "removed"
    /\ \/ u.st = "removed"
       \/ u.inc > held.inc
       \/ u.inc = held.inc /\ (Rank[u.st] > Rank[held.st] \/ u.st = "alive")
=============================================================================
