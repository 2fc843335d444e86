----------------------- MODULE QuorumCommit_TimeoutAbort -----------------------
(***************************************************************************)
(* WRONG ON PURPOSE.  A participant aborts a prepared transaction on a     *)
(* heartbeat timeout alone, while its PREPARED answer already counts       *)
(* toward the coordinator's quorum: the coordinator commits, the           *)
(* participant aborted.                                                    *)
(* QuorumCommit_TimeoutAbort.cfg replaces OnTimeout with AbortOnTimeout;   *)
(* TLC must report NoSplitDecision violated.                               *)
(***************************************************************************)
EXTENDS QuorumCommit

AbortOnTimeout(p, t) ==
    /\ Begun(t) /\ Up(p) /\ p # Coord(t)
    /\ intent[p][txn[t].key] = t
    /\ aborted' = [aborted EXCEPT ![p] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![p][txn[t].key] = NoTxn]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, votes, decision,
                   decidedWith, ones, crashes>>
=============================================================================
