------------------------------ MODULE QuorumRemoval ------------------------------
(***************************************************************************)
(* Removing a member under QUORUM transactions, and the rule by which a    *)
(* participant resolves a pending transaction whose coordinator was        *)
(* removed (docs/reliability.md finding 4; docs/design/quorum-removal.md). *)
(*                                                                         *)
(* Transactions are QuorumCommit's 2PC on one key: the coordinator fixes   *)
(* the member set (its view) at Begin; a participant answers PREPARED only *)
(* if the PREPARE's member set is its own view (MembershipQuorum R1) and  *)
(* no intent holds the key, and places an intent; the coordinator decides  *)
(* COMMIT with floor(n / 2) + 1 PREPARED answers of the member set (its   *)
(* row: written and applied at once), or ABORT while undecided; a         *)
(* participant asks the coordinator (QueryDecision), which decides ABORT  *)
(* if it had not decided; a committed row reaches members by the apply-   *)
(* once path and releases the intent.                                     *)
(*                                                                         *)
(* The member Removed is removed by a committed membership change          *)
(* (CommitRemoval: a QUORUM write on _cluster that shrinks the member set, *)
(* coordinated by a remaining member, which applies it at once); every     *)
(* other remaining member applies the change later, in its own time       *)
(* (ApplyRemoval).  A member's view is the set before or after the change *)
(* as it has applied it.  It stops following Removed in a later step      *)
(* (StopFollowing: the code stops the appliers of a removed member at its *)
(* next look at _cluster, and a row already taken from Removed may still  *)
(* wait for the writer): until then it still takes rows from Removed      *)
(* (COMMIT messages or its relay, including rows in flight when Removed   *)
(* died); from then on it refuses them (Receive).                         *)
(* Rows of origin Removed that a remaining member holds still flow between *)
(* remaining members (their relays ship every origin).                    *)
(*                                                                         *)
(* Removed may have decided (COMMIT: its row in its WAL, applied there) or *)
(* not, before it crashed (killed: it never comes back, its data is gone) *)
(* or while it runs on unaware of its removal (a partition); its row may   *)
(* have reached some members or none.  Once the removal commits it       *)
(* prepares and receives nothing more.                                    *)
(*                                                                         *)
(* The rule (ResolveRemoved): a participant p that has applied the removal *)
(* and holds the intent of a transaction t whose coordinator it no longer *)
(* has in its view asks every member of its view.  Each member q answers  *)
(* "no row" (AnswerNoRow) only once q itself has stopped following Removed *)
(* and only while q holds no row of t; a member that holds the row sends it*)
(* (Receive: it relays it), and p commits by applying it.  When every      *)
(* member of p's view, p included, answered "no row", p aborts t.         *)
(* Why it holds: a remaining member can get Removed's row directly only   *)
(* before it stops following Removed, so every answer given after that is *)
(* final for direct delivery; a row held by any remaining member came     *)
(* from a first one that got it directly, and that member never answers   *)
(* "no row".                                                              *)
(*                                                                         *)
(* A participant may learn COMMIT without the row (LearnCommit: the        *)
(* coordinator answers its QueryDecision once its row is durable, or a     *)
(* member passes it on); it keeps the intent and waits for the row.  For   *)
(* the rule a learned COMMIT is no knowledge: the participant answers "no  *)
(* row" and aborts when every member of its view did.  That is safe: an    *)
(* acknowledged transaction has its row on a quorum of its member set,     *)
(* which holds a remaining member, so somebody answers with the row; if    *)
(* nobody holds it, no client was told, and the row is gone with           *)
(* Removed's data (NoSplitDecision lets Removed keep a committed row the   *)
(* others abort).                                                          *)
(*                                                                         *)
(* Wrong variants: QuorumRemoval_AbortOnRemoval (abort once the removal is *)
(* applied, asking nobody), QuorumRemoval_AnswerBeforeApplied (a member  *)
(* answers "no row" before it has applied the removal, while it still      *)
(* follows Removed), QuorumRemoval_AnswerBeforeStopped (a member answers  *)
(* once it applied the removal, before it stopped following Removed: the  *)
(* code's poll), QuorumRemoval_QuorumAnswers (a quorum of the view        *)
(* answering "no row" is enough); QuorumRemoval_NoRule is the code before  *)
(* the rule (RemovedTxnsResolved fails, finding 4), and                    *)
(* QuorumRemoval_WaitForLearned the code before the learned-COMMIT fix (a  *)
(* participant that learned COMMIT waits for the row: RemovedTxnsResolved  *)
(* fails).                                                                 *)
(*                                                                         *)
(* Abstracted: one key and no versions (QuorumCommit checks lost updates,  *)
(* MembershipQuorum the quorums across views); LSNs and origins (a row is  *)
(* a transaction's; rows of one origin arrive in any order); ONE writes;  *)
(* crashes of remaining members (their intents, rows and the removal are  *)
(* durable, answers lost in a crash are asked again: a crash only delays  *)
(* them) and their restarts; one removal, no                              *)
(* join (R2 holds any later change back until the rule has run: that is   *)
(* the liveness checked).  Messages are atomic steps and may be late or    *)
(* lost; a PREPARED answer reaches a coordinator that is up.              *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Members,      \* instance ids at the start, e.g. {1, 2, 3}: the registered membership
    Removed,      \* the member the membership change removes
    Txns,         \* QUORUM transactions (model values); each begins at most once
    Coordinators  \* the members clients send QUORUM writes to (Removed among them)

ASSUME Removed \in Members /\ Coordinators \subseteq Members

Remaining == Members \ {Removed}
NoTxn == "none"
Quorum(S) == Cardinality(S) \div 2 + 1

VARIABLES
    removedUp,    \* Removed's process runs (FALSE once killed: it never comes back)
    applier,      \* applier: the remaining members that applied the removal
    stopped,      \* stopped: the remaining members that stopped following Removed
    intent,       \* intent[m]: the transaction whose intent holds the key on m, or NoTxn
    applied,      \* applied[m]: the transactions whose row m holds (its vclock)
    aborted,      \* aborted[m]: the transactions m aborted
    txn,          \* txn[t]: [coord, members]; coord = 0 until t begins
    votes,        \* votes[t]: PREPARED answers the coordinator holds
    decision,     \* decision[t]: "none" | "commit" | "abort", at the coordinator
    noRow,        \* noRow[p][t]: members that answered p "no row of t" (after applying the removal)
    learned       \* learned[m]: the transactions m learned COMMIT for without holding the row

vars == <<removedUp, applier, stopped, intent, applied, aborted, txn, votes, decision, noRow, learned>>

-----------------------------------------------------------------------------
RemovalCommitted == applier # {}
View(m) == IF m \in applier THEN Remaining ELSE Members
Begun(t) == txn[t].coord # 0
Coord(t) == txn[t].coord
(* A member takes part: a remaining one always (its crashes are delays),   *)
(* Removed while its process runs and it is not yet removed.              *)
Active(m) == m \in Remaining \/ (removedUp /\ ~RemovalCommitted)
(* A coordinator can decide: Removed while its process runs, even once     *)
(* removed (it may not know).                                              *)
CoordUp(t) == Coord(t) \in Remaining \/ removedUp
(* Prepared at m, not finished: the intent is held. *)
Pending(m) == IF intent[m] = NoTxn THEN {} ELSE {intent[m]}
(* m's coordinator of t is gone from its view: only the rule resolves t. *)
CoordRemovedFor(m, t) == Coord(t) \notin View(m)

(* Rules the implementation chooses; each wrong variant replaces one.      *)

(* May q answer p's question "do you hold t's row?" with "no row"? *)
MayAnswerNoRow(q, p, t) == q \in stopped
(* May p abort t, whose coordinator was removed? *)
MayResolveAbort(p, t) == View(p) \subseteq noRow[p][t]

-----------------------------------------------------------------------------
Init ==
    /\ removedUp = TRUE
    /\ applier = {}
    /\ stopped = {}
    /\ intent = [m \in Members |-> NoTxn]
    /\ applied = [m \in Members |-> {}]
    /\ aborted = [m \in Members |-> {}]
    /\ txn = [t \in Txns |-> [coord |-> 0, members |-> {}]]
    /\ votes = [t \in Txns |-> {}]
    /\ decision = [t \in Txns |-> "none"]
    /\ noRow = [p \in Members |-> [t \in Txns |-> {}]]
    /\ learned = [m \in Members |-> {}]

(* Apply t's row on m: it releases t's intent (and a COMMIT learned for    *)
(* it is now held).                                                        *)
ApplyRow(m, t) ==
    /\ applied' = [applied EXCEPT ![m] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![m] = IF @ = t THEN NoTxn ELSE @]
    /\ learned' = [learned EXCEPT ![m] = @ \ {t}]

(* A client's QUORUM transaction starts on coordinator c: the member set   *)
(* is c's view.                                                           *)
Begin(t, c) ==
    /\ c \in Coordinators /\ ~Begun(t) /\ Active(c)
    /\ txn' = [txn EXCEPT ![t] = [coord |-> c, members |-> View(c)]]
    /\ UNCHANGED <<removedUp, applier, stopped, intent, applied, aborted, votes, decision, noRow, learned>>

(* Member p handles PREPARE(t): the member set is its view (R1), no intent *)
(* holds the key; it places the intent.  The answer reaches the           *)
(* coordinator if that is up.                                             *)
Prepare(p, t) ==
    /\ Begun(t) /\ decision[t] = "none" /\ Active(p)
    /\ p \in txn[t].members
    /\ txn[t].members = View(p)
    /\ intent[p] = NoTxn
    /\ t \notin applied[p] /\ t \notin aborted[p]
    /\ intent' = [intent EXCEPT ![p] = t]
    /\ votes' = IF CoordUp(t) THEN [votes EXCEPT ![t] = @ \cup {p}] ELSE votes
    /\ UNCHANGED <<removedUp, applier, stopped, applied, aborted, txn, decision, noRow, learned>>

(* The coordinator decides COMMIT with a quorum of the member set: the row *)
(* is in its WAL and applied there.                                        *)
DecideCommit(t) ==
    /\ Begun(t) /\ decision[t] = "none" /\ CoordUp(t)
    /\ Cardinality(votes[t] \cap txn[t].members) >= Quorum(txn[t].members)
    /\ decision' = [decision EXCEPT ![t] = "commit"]
    /\ ApplyRow(Coord(t), t)
    /\ UNCHANGED <<removedUp, applier, stopped, aborted, txn, votes, noRow>>

(* The coordinator decides ABORT (a timeout, CONFLICT answers, or a        *)
(* participant's question): no row.                                       *)
DecideAbort(t) ==
    /\ Begun(t) /\ decision[t] = "none" /\ CoordUp(t)
    /\ decision' = [decision EXCEPT ![t] = "abort"]
    /\ aborted' = [aborted EXCEPT ![Coord(t)] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![Coord(t)] = IF @ = t THEN NoTxn ELSE @]
    /\ UNCHANGED <<removedUp, applier, stopped, applied, txn, votes, noRow, learned>>

(* A participant asks its coordinator, which decides ABORT if undecided. *)
QueryDecision(p, t) ==
    /\ Begun(t) /\ Active(p) /\ p # Coord(t)
    /\ intent[p] = t /\ ~CoordRemovedFor(p, t)
    /\ DecideAbort(t)

(* ABORT reaches participant p: the coordinator's, while it runs, or a     *)
(* remaining member that aborted t passes it on: the coordinator's ABORT,  *)
(* or its own ResolveRemoved (decision[t] may then be "commit", at a       *)
(* Removed whose row nobody remaining holds); it ends a learned COMMIT     *)
(* (Participant.decision_learned).                                         *)
ParticipantAbort(p, t) ==
    /\ Begun(t) /\ Active(p) /\ p # Coord(t)
    /\ intent[p] = t
    /\ \/ decision[t] = "abort" /\ CoordUp(t)
       \/ \E q \in Remaining : t \in aborted[q]
    /\ aborted' = [aborted EXCEPT ![p] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![p] = NoTxn]
    /\ learned' = [learned EXCEPT ![p] = @ \ {t}]
    /\ UNCHANGED <<removedUp, applier, stopped, applied, txn, votes, decision, noRow>>

(* COMMIT reaches participant p without the row: the coordinator's answer  *)
(* to p's QueryDecision (it answers COMMIT once its row is durable), or a  *)
(* remaining member that knows it (learned, or holds the row) passes it    *)
(* on.  p keeps the intent and waits for the row (Receive).  No guard on   *)
(* p's view or on its following the coordinator, as for ParticipantAbort:  *)
(* the answer is the reply to a question p asked while the coordinator     *)
(* was in its view, it may arrive late, and the removal refuses rows and   *)
(* requests of Removed, not replies; this guard is the weakest, so it      *)
(* also covers QueryDecision's (~CoordRemovedFor) and Receive's (not       *)
(* stopped).  Learning is not holding: AnswerNoRow and ResolveRemoved      *)
(* ignore it (ResolveRemoved drops it).                                    *)
LearnCommit(p, t) ==
    /\ Begun(t) /\ Active(p) /\ p # Coord(t)
    /\ intent[p] = t /\ t \notin learned[p]
    /\ \/ decision[t] = "commit" /\ CoordUp(t)
       \/ \E q \in Remaining \ {p} : t \in learned[q] \cup applied[q]
    /\ learned' = [learned EXCEPT ![p] = @ \cup {t}]
    /\ UNCHANGED <<removedUp, applier, stopped, intent, applied, aborted, txn, votes, decision, noRow>>

(* t's row reaches remaining member m from member q that holds it: the     *)
(* coordinator's COMMIT or relay (rows in flight from Removed arrive even  *)
(* after it died), or another member's relay.  Once m stopped following   *)
(* Removed it takes no row from it (one taken before and still queued for *)
(* the writer counts as not stopped yet).                                 *)
Receive(m, q, t) ==
    /\ m \in Remaining /\ q # m /\ (q \in Remaining \/ m \notin stopped)
    /\ t \in applied[q] /\ t \notin applied[m]
    /\ ApplyRow(m, t)
    /\ UNCHANGED <<removedUp, applier, stopped, aborted, txn, votes, decision, noRow>>

(* Removed is killed: it never comes back, its data is gone. *)
Kill ==
    /\ removedUp
    /\ removedUp' = FALSE
    /\ UNCHANGED <<applier, stopped, intent, applied, aborted, txn, votes, decision, noRow, learned>>

(* The removal commits, coordinated by remaining member c, which applies   *)
(* it.  R2 lets the members vote for it: every pending transaction is of  *)
(* the one view there is.                                                 *)
CommitRemoval(c) ==
    /\ c \in Remaining /\ ~RemovalCommitted
    /\ applier' = {c}
    /\ UNCHANGED <<removedUp, stopped, intent, applied, aborted, txn, votes, decision, noRow, learned>>

(* Remaining member m applies the removal: its view shrinks.               *)
ApplyRemoval(m) ==
    /\ RemovalCommitted /\ m \in Remaining \ applier
    /\ applier' = applier \cup {m}
    /\ UNCHANGED <<removedUp, stopped, intent, applied, aborted, txn, votes, decision, noRow, learned>>

(* Then it stops following Removed: its appliers of Removed stop, and      *)
(* nothing they took is left waiting for the writer.                       *)
StopFollowing(m) ==
    /\ m \in applier \ stopped
    /\ stopped' = stopped \cup {m}
    /\ UNCHANGED <<removedUp, applier, intent, applied, aborted, txn, votes, decision, noRow, learned>>

(* p asks about t (it applied the removal, holds t's intent, t's          *)
(* coordinator is out of its view); q answers "no row": it holds none.    *)
AnswerNoRow(q, p, t) ==
    /\ p \in applier /\ intent[p] = t /\ CoordRemovedFor(p, t)
    /\ q \in View(p) /\ q \notin noRow[p][t]
    /\ t \notin applied[q]
    /\ MayAnswerNoRow(q, p, t)
    /\ noRow' = [noRow EXCEPT ![p][t] = @ \cup {q}]
    /\ UNCHANGED <<removedUp, applier, stopped, intent, applied, aborted, txn, votes, decision, learned>>

(* Every member of p's view answered "no row": p aborts t. *)
ResolveRemoved(p, t) ==
    /\ p \in applier /\ intent[p] = t /\ CoordRemovedFor(p, t)
    /\ MayResolveAbort(p, t)
    /\ aborted' = [aborted EXCEPT ![p] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![p] = NoTxn]
    /\ learned' = [learned EXCEPT ![p] = @ \ {t}]
    /\ UNCHANGED <<removedUp, applier, stopped, applied, txn, votes, decision, noRow>>

(* The end of a run: the removal applied everywhere and Removed followed  *)
(* by none, no remaining member holds an intent, the remaining members    *)
(* hold the same rows.  Any other state without a successor is a         *)
(* deadlock.                                                              *)
Terminated ==
    /\ stopped = Remaining
    /\ \A m \in Remaining : intent[m] = NoTxn
    /\ \A m, q \in Remaining : applied[m] = applied[q]
    /\ UNCHANGED vars

Next ==
    \/ \E t \in Txns, c \in Members : Begin(t, c)
    \/ \E t \in Txns : DecideCommit(t) \/ DecideAbort(t)
    \/ \E p \in Members, t \in Txns : Prepare(p, t) \/ QueryDecision(p, t)
                                      \/ ParticipantAbort(p, t) \/ ResolveRemoved(p, t)
                                      \/ LearnCommit(p, t)
    \/ \E m, q \in Members, t \in Txns : Receive(m, q, t) \/ AnswerNoRow(q, m, t)
    \/ Kill
    \/ \E c \in Members : CommitRemoval(c)
    \/ \E m \in Members : ApplyRemoval(m) \/ StopFollowing(m)
    \/ Terminated

(* Fairness for what remaining members do; none for Removed (it may hang   *)
(* or die) and none for the removal to commit (the properties start from *)
(* it).                                                                   *)
Fairness ==
    /\ \A m \in Remaining : WF_vars(ApplyRemoval(m)) /\ WF_vars(StopFollowing(m))
    /\ \A m \in Remaining, q \in Remaining, t \in Txns : WF_vars(Receive(m, q, t))
    /\ \A t \in Txns : WF_vars(Coord(t) \in Remaining /\ (DecideCommit(t) \/ DecideAbort(t)))
    /\ \A p, q \in Remaining, t \in Txns :
          /\ WF_vars(AnswerNoRow(q, p, t))
          /\ WF_vars(ResolveRemoved(p, t))
          /\ WF_vars(Coord(t) \in Remaining /\ QueryDecision(p, t))
          /\ WF_vars(ParticipantAbort(p, t))

Spec == Init /\ [][Next]_vars
FairSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ removedUp \in BOOLEAN
    /\ applier \subseteq Remaining
    /\ stopped \subseteq applier
    /\ intent \in [Members -> Txns \cup {NoTxn}]
    /\ applied \in [Members -> SUBSET Txns]
    /\ aborted \in [Members -> SUBSET Txns]
    /\ decision \in [Txns -> {"none", "commit", "abort"}]
    /\ learned \in [Members -> SUBSET Txns]

(* A COMMIT learned is the coordinator's decision, and it is kept only     *)
(* with the intent: the row or the rule ends both.                         *)
LearnedOnlyCommitted ==
    \A m \in Members, t \in Txns : t \in learned[m] => decision[t] = "commit" /\ intent[m] = t

(* Never committed on one remaining member and aborted on another.        *)
(* (Removed may hold a committed row the others abort: nobody was told it *)
(* committed, see NoAckedAborted, and its data is gone.)                  *)
NoSplitDecision ==
    \A t \in Txns :
        ~((\E m \in Remaining : t \in applied[m]) /\ (\E m \in Remaining : t \in aborted[m]))

(* The coordinator's decision is never contradicted by a remaining member. *)
AbortDecisionKept ==
    \A t \in Txns : decision[t] = "abort" => \A m \in Members : t \notin applied[m]

(* Acknowledged: a quorum of the member set applied the row (the client's  *)
(* acknowledgement).  Such a transaction is aborted nowhere.               *)
Acked(t) == Begun(t) /\ Cardinality({m \in txn[t].members : t \in applied[m]}) >= Quorum(txn[t].members)
NoAckedAborted ==
    \A t \in Txns : Acked(t) => \A m \in Members : t \notin aborted[m]

(* The remaining members converge: once every one stopped following       *)
(* Removed, none holds an intent and none can take a row from another,    *)
(* they hold the same rows.                                               *)
Quiet ==
    /\ stopped = Remaining
    /\ \A m \in Remaining : intent[m] = NoTxn
    /\ ~\E m, q \in Remaining, t \in Txns : ENABLED Receive(m, q, t)
ConvergedWhenQuiet ==
    Quiet => \A m, q \in Remaining : applied[m] = applied[q]

(* R2 would hold a later membership change back at m: a pending           *)
(* transaction of another view.                                           *)
Blocked(m) == \E u \in Pending(m) : txn[u].members # View(m)

Symmetry == Permutations(Txns)

-----------------------------------------------------------------------------
(* Liveness *)

(* A pending transaction of the removed coordinator is eventually         *)
(* resolved on every remaining member, once the removal is committed.      *)
RemovedTxnsResolved ==
    \A m \in Remaining, t \in Txns :
        (RemovalCommitted /\ intent[m] = t /\ Coord(t) = Removed) ~> intent[m] # t

(* After the removal, R2 stops holding later membership changes back.     *)
LaterChangeNotBlocked ==
    RemovalCommitted ~> \A m \in Remaining : ~Blocked(m)

(* The remaining members end holding the same rows. *)
RemainingConverge ==
    <>[](\A m, q \in Remaining : applied[m] = applied[q])

=============================================================================
