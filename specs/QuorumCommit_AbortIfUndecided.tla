--------------------- MODULE QuorumCommit_AbortIfUndecided ---------------------
(***************************************************************************)
(* The timeout rule as first written, read literally (finding F4 in        *)
(* docs/design/FINDINGS.md; docs/design/README.md §4.5 holds the corrected *)
(* one).  A participant that timed out asks the coordinator and the other  *)
(* participants, and aborts when no member has decided yet.  Nobody had,   *)
(* but the coordinator still holds a quorum of PREPARED answers, this      *)
(* participant's among them, and commits a moment later.                   *)
(* QuorumCommit_AbortIfUndecided.cfg replaces OnTimeout with               *)
(* AbortIfNoneDecided; TLC must report NoSplitDecision violated.           *)
(***************************************************************************)
EXTENDS QuorumCommit

AbortIfNoneDecided(p, t) ==
    /\ Begun(t) /\ Up(p) /\ p # Coord(t)
    /\ intent[p][txn[t].key] = t
    /\ decision[t] = "none"                    \* every member answered: undecided
    /\ \A m \in Members : ~CommittedOn(m, t)
    /\ aborted' = [aborted EXCEPT ![p] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![p][txn[t].key] = NoTxn]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, votes, decision,
                   decidedWith, ones, crashes>>
=============================================================================
