-------------------- MODULE QuorumParallel_VoteBeforeDurable --------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  A member answers PREPARED as soon as its slot is     *)
(* written, before the fsync: the coordinator counts volatile slots and    *)
(* acks.  A crash of that member loses the slot, fences then refuse a      *)
(* majority, and recovery aborts the acked transaction.                    *)
(* QuorumParallel_VoteBeforeDurable.cfg replaces AckCount; TLC must report *)
(* AckedIsCommitted violated.                                              *)
(***************************************************************************)
EXTENDS QuorumParallel

AckCountVolatile(t) == Cardinality({m \in Members : slot[m][t] \in {"pv", "p"}})
=============================================================================
