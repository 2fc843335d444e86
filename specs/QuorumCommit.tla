------------------------------ MODULE QuorumCommit ------------------------------
(***************************************************************************)
(* QUORUM writes by two-phase commit (docs/design/README.md §4.5), beside  *)
(* ONE writes and relay delivery.                                          *)
(*                                                                         *)
(* A coordinator reads the version of the key, then sends PREPARE carrying *)
(* it.  A member (the coordinator included) answers CONFLICT when a live   *)
(* intent of another transaction holds the key or its stored version      *)
(* differs from the one read; otherwise it places an intent and answers   *)
(* PREPARED.  With floor(Total / 2) + 1 PREPARED answers, counted on the   *)
(* total membership, the coordinator decides COMMIT: it assigns the next  *)
(* LSN of its origin and a commit stamp above every version returned,     *)
(* writes the row to its WAL and applies it (DecideCommit).  The exact WAL *)
(* row then reaches every member through the apply-once path, as a COMMIT *)
(* message or from a relay (ApplierReceive); applying it releases the     *)
(* intent.  The coordinator may decide ABORT instead at any time before a *)
(* commit (a timeout or CONFLICT answers); an abort takes no LSN.         *)
(*                                                                         *)
(* A participant whose coordinator seems gone does not abort on its own:   *)
(* it asks for the decision (QueryDecision).  The coordinator answers with *)
(* its decision, deciding ABORT on the spot if it had none, so it can      *)
(* never commit afterwards; participants that learned a decision pass it  *)
(* on.  While the coordinator is down the intent stays; a restarted        *)
(* coordinator aborts what it had not decided (its votes were in memory). *)
(* The first design said "only a transaction no member has decided may be  *)
(* aborted"; checking that and aborting are one step at the coordinator    *)
(* here, because a participant that finds no decision and aborts by itself *)
(* splits the decision (docs/design/FINDINGS.md, F4; variant               *)
(* QuorumCommit_AbortIfUndecided).                                         *)
(*                                                                         *)
(* Decisions, intents, WAL rows and stored versions are durable; a crash   *)
(* loses the coordinator's collected votes only (process crashes: the      *)
(* OS-crash loss of a WAL tail is VClockReplication's business).           *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
    Members,     \* instance ids, e.g. {1, 2, 3}: the total registered membership
    Keys,        \* primary keys
    Txns,        \* QUORUM transactions (model values); each begins at most once
    Coordinators,\* the members clients send QUORUM writes to (Members, or fewer)
    OneWriters,  \* the members clients send ONE writes to (Members, or fewer)
    MaxOne,      \* bound on ONE writes
    MaxCrashes   \* bound on crashes

ASSUME Members \subseteq Nat /\ 0 \notin Members
ASSUME Coordinators \subseteq Members /\ OneWriters \subseteq Members
ASSUME MaxOne \in Nat /\ MaxCrashes \in Nat

Total == Cardinality(Members)
QuorumSize == Total \div 2 + 1
NoTxn == "none"
ONE == "one"
NoVersion == [hlc |-> 0, origin |-> 0]

VARIABLES
    status,      \* status[m]: "up" | "down"
    stored,      \* stored[m][k]: version [hlc, origin] of key k on m (rows carry no values here)
    hlc,         \* hlc[m]: m's hybrid logical clock (logical part only)
    rows,        \* rows[o]: the WAL rows of origin o, in LSN order (durable)
    vclock,      \* vclock[m][o]: rows of origin o applied on m
    intent,      \* intent[m][k]: the transaction whose intent holds k on m, or NoTxn
    txn,         \* txn[t]: [coord, key, read]; coord = 0 until t begins
    votes,       \* votes[t]: PREPARED answers the coordinator holds (memory)
    decision,    \* decision[t]: "none" | "commit" | "abort", at the coordinator
    decidedWith, \* decidedWith[t]: the votes a commit was decided with (history)
    aborted,     \* aborted[m]: the transactions m aborted (committed ones show in its rows)
    ones,        \* ONE writes so far
    crashes      \* crashes so far

vars == <<status, stored, hlc, rows, vclock, intent, txn, votes, decision,
          decidedWith, aborted, ones, crashes>>

-----------------------------------------------------------------------------
(* Rules the implementation chooses; each wrong variant replaces one.      *)

(* Success is counted on the total registered membership. *)
HasQuorum(c, v) == Cardinality(v) >= QuorumSize

(* The commit stamp is taken at the decision, with the LSN: above the      *)
(* coordinator's clock and every version returned (the version read).     *)
CommitStamp(t) == (IF hlc[txn[t].coord] > txn[t].read.hlc THEN hlc[txn[t].coord]
                   ELSE txn[t].read.hlc) + 1

-----------------------------------------------------------------------------
Newer(a, b) == a.hlc > b.hlc \/ (a.hlc = b.hlc /\ a.origin > b.origin)
AtLeast(a, b) == ~Newer(b, a)
Coord(t) == txn[t].coord
Begun(t) == txn[t].coord # 0
Up(m) == status[m] = "up"

(* Apply one WAL row on m: upsert if its version is at least the stored   *)
(* one; a QUORUM row releases its transaction's intent.                   *)
Applied(m, r) ==
    /\ stored' = [stored EXCEPT ![m][r.key] =
                    IF AtLeast([hlc |-> r.hlc, origin |-> r.origin], @)
                    THEN [hlc |-> r.hlc, origin |-> r.origin] ELSE @]
    /\ hlc' = [hlc EXCEPT ![m] = IF r.hlc > @ THEN r.hlc ELSE @]
    /\ vclock' = [vclock EXCEPT ![m][r.origin] = r.lsn]
    /\ intent' = [intent EXCEPT ![m][r.key] = IF @ = r.txn THEN NoTxn ELSE @]

Init ==
    /\ status = [m \in Members |-> "up"]
    /\ stored = [m \in Members |-> [k \in Keys |-> NoVersion]]
    /\ hlc = [m \in Members |-> 0]
    /\ rows = [o \in Members |-> <<>>]
    /\ vclock = [m \in Members |-> [o \in Members |-> 0]]
    /\ intent = [m \in Members |-> [k \in Keys |-> NoTxn]]
    /\ txn = [t \in Txns |-> [coord |-> 0, key |-> NoTxn, read |-> NoVersion]]
    /\ votes = [t \in Txns |-> {}]
    /\ decision = [t \in Txns |-> "none"]
    /\ decidedWith = [t \in Txns |-> {}]
    /\ aborted = [m \in Members |-> {}]
    /\ ones = 0
    /\ crashes = 0

(* A ONE write: committed locally at once (it waits for no intent), then  *)
(* replicated by the relays.  Its stamp s is any above the member's clock  *)
(* (the implementation's HLC); WriteOne takes the smallest, and the trace  *)
(* check the implementation's (specs/QuorumCommitTrace.tla).              *)
WriteOneAt(m, k, s) ==
    /\ m \in OneWriters /\ Up(m) /\ ones < MaxOne
    /\ s > hlc[m]
    /\ LET r == [origin |-> m, lsn |-> Len(rows[m]) + 1, hlc |-> s,
                 key |-> k, txn |-> ONE]
       IN /\ rows' = [rows EXCEPT ![m] = Append(@, r)]
          /\ Applied(m, r)
    /\ ones' = ones + 1
    /\ UNCHANGED <<status, txn, votes, decision, decidedWith, aborted, crashes>>

WriteOne(m, k) == WriteOneAt(m, k, hlc[m] + 1)

(* A client's QUORUM transaction starts on coordinator c: it reads the     *)
(* version of key k that c stores.                                        *)
Begin(t, c, k) ==
    /\ c \in Coordinators /\ ~Begun(t) /\ Up(c)
    /\ txn' = [txn EXCEPT ![t] = [coord |-> c, key |-> k, read |-> stored[c][k]]]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, intent, votes, decision,
                   decidedWith, aborted, ones, crashes>>

(* Member p handles PREPARE(t, version read) and answers PREPARED: no     *)
(* live intent holds the key and the stored version is the one read.  It  *)
(* places the intent; the answer reaches the coordinator if it is up      *)
(* (else it is lost with the votes).  A CONFLICT answer changes nothing:  *)
(* it is this action not being enabled.                                   *)
Prepare(p, t) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ Up(p)
    /\ LET k == txn[t].key
       IN /\ intent[p][k] = NoTxn
          /\ stored[p][k] = txn[t].read
          /\ intent' = [intent EXCEPT ![p][k] = t]
    /\ votes' = IF Up(Coord(t)) THEN [votes EXCEPT ![t] = @ \cup {p}] ELSE votes
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, decision, decidedWith, aborted,
                   ones, crashes>>

(* The coordinator decides COMMIT: next LSN and commit stamp together,     *)
(* the row in its WAL, applied locally.  The stamp s is any at or above    *)
(* CommitStamp(t) (the implementation's HLC takes one above its clock and  *)
(* the version read); DecideCommit takes CommitStamp(t) itself.           *)
DecideCommitAt(t, s) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ Up(Coord(t))
    /\ HasQuorum(Coord(t), votes[t])
    /\ s >= CommitStamp(t)
    /\ LET c == Coord(t)
           r == [origin |-> c, lsn |-> Len(rows[c]) + 1, hlc |-> s,
                 key |-> txn[t].key, txn |-> t]
       IN /\ rows' = [rows EXCEPT ![c] = Append(@, r)]
          /\ Applied(c, r)
    /\ decision' = [decision EXCEPT ![t] = "commit"]
    /\ decidedWith' = [decidedWith EXCEPT ![t] = votes[t]]
    /\ UNCHANGED <<status, txn, votes, aborted, ones, crashes>>

DecideCommit(t) == DecideCommitAt(t, CommitStamp(t))

(* The coordinator decides ABORT (a timeout, or CONFLICT answers): no LSN. *)
DecideAbort(t) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ Up(Coord(t))
    /\ decision' = [decision EXCEPT ![t] = "abort"]
    /\ aborted' = [aborted EXCEPT ![Coord(t)] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![Coord(t)][txn[t].key] = IF @ = t THEN NoTxn ELSE @]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, votes, decidedWith,
                   ones, crashes>>

(* A participant that timed out asks for the decision.  The coordinator   *)
(* answers; if it had not decided, the question makes it decide ABORT.    *)
(* (A decision already made reaches the participant by ApplierReceive or  *)
(* ParticipantAbort.)                                                     *)
QueryDecision(p, t) ==
    /\ Begun(t) /\ Up(p) /\ p # Coord(t)
    /\ intent[p][txn[t].key] = t
    /\ Up(Coord(t)) /\ decision[t] = "none"
    /\ DecideAbort(t)

(* ABORT reaches a participant (from the coordinator, or from any member  *)
(* that learned it, in answer to its question): the intent goes.          *)
ParticipantAbort(p, t) ==
    /\ Begun(t) /\ Up(p) /\ p # Coord(t)
    /\ decision[t] = "abort" /\ intent[p][txn[t].key] = t
    /\ aborted' = [aborted EXCEPT ![p] = @ \cup {t}]
    /\ intent' = [intent EXCEPT ![p][txn[t].key] = NoTxn]
    /\ UNCHANGED <<status, stored, hlc, rows, vclock, txn, votes, decision,
                   decidedWith, ones, crashes>>

(* The next row of origin o reaches m (a COMMIT message or a relay): it is *)
(* applied once, in LSN order.                                            *)
ApplierReceive(m, o) ==
    /\ Up(m) /\ m # o
    /\ vclock[m][o] < Len(rows[o])
    /\ Applied(m, rows[o][vclock[m][o] + 1])
    /\ UNCHANGED <<status, rows, txn, votes, decision, decidedWith, aborted, ones, crashes>>

(* A crash loses what is in memory: the votes of the transactions m      *)
(* coordinates.                                                           *)
Crash(m) ==
    /\ Up(m) /\ crashes < MaxCrashes
    /\ status' = [status EXCEPT ![m] = "down"]
    /\ votes' = [t \in Txns |-> IF Begun(t) /\ Coord(t) = m THEN {} ELSE votes[t]]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<stored, hlc, rows, vclock, intent, txn, decision, decidedWith,
                   aborted, ones>>

(* A restarted coordinator aborts every transaction it had not decided.   *)
Restart(m) ==
    /\ status[m] = "down"
    /\ status' = [status EXCEPT ![m] = "up"]
    /\ LET undecided == {t \in Txns : Begun(t) /\ Coord(t) = m /\ decision[t] = "none"}
       IN /\ decision' = [t \in Txns |-> IF t \in undecided THEN "abort" ELSE decision[t]]
          /\ aborted' = [aborted EXCEPT ![m] = @ \cup undecided]
          /\ intent' = [intent EXCEPT ![m] =
                          [k \in Keys |-> IF @[k] \in undecided THEN NoTxn ELSE @[k]]]
    /\ UNCHANGED <<stored, hlc, rows, vclock, txn, votes, decidedWith, ones, crashes>>

(* What a participant does when its coordinator seems gone (a heartbeat  *)
(* timeout): ask for the decision.                                         *)
OnTimeout(p, t) == QueryDecision(p, t)

(* The end of a run: every transaction began and was decided, every row   *)
(* is everywhere, no intent is left.  Any other state without a successor *)
(* is a deadlock.                                                         *)
Terminated ==
    /\ \A t \in Txns : Begun(t) /\ decision[t] # "none"
    /\ ones = MaxOne
    /\ \A m \in Members : Up(m) /\ \A o \in Members : vclock[m][o] = Len(rows[o])
    /\ \A m \in Members, k \in Keys : intent[m][k] = NoTxn
    /\ UNCHANGED vars

Next ==
    \/ \E m \in Members, k \in Keys : WriteOne(m, k)
    \/ \E t \in Txns, c \in Members, k \in Keys : Begin(t, c, k)
    \/ \E t \in Txns : DecideCommit(t) \/ DecideAbort(t)
    \/ \E p \in Members, t \in Txns : Prepare(p, t) \/ OnTimeout(p, t)
                                      \/ ParticipantAbort(p, t)
    \/ \E m, o \in Members : ApplierReceive(m, o)
    \/ \E m \in Members : Crash(m) \/ Restart(m)
    \/ Terminated

Fairness ==
    /\ \A m, o \in Members : WF_vars(ApplierReceive(m, o))
    /\ \A m \in Members : WF_vars(Restart(m))
    /\ \A t \in Txns : WF_vars(DecideCommit(t) \/ DecideAbort(t))
    /\ \A p \in Members, t \in Txns : WF_vars(QueryDecision(p, t))
                                      /\ WF_vars(ParticipantAbort(p, t))

Spec == Init /\ [][Next]_vars
FairSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ status \in [Members -> {"up", "down"}]
    /\ decision \in [Txns -> {"none", "commit", "abort"}]
    /\ aborted \in [Members -> SUBSET Txns]
    /\ \A m \in Members, k \in Keys : intent[m][k] \in Txns \cup {NoTxn}

CommitVersion(t) ==
    LET r == CHOOSE r \in {rows[Coord(t)][i] : i \in DOMAIN rows[Coord(t)]} : r.txn = t
    IN [hlc |-> r.hlc, origin |-> r.origin]

(* Two committed QUORUM transactions on one key never both miss each     *)
(* other: one of them read the other's write or something newer.          *)
NoLostUpdate ==
    \A t1, t2 \in Txns :
        (t1 # t2 /\ decision[t1] = "commit" /\ decision[t2] = "commit"
                 /\ txn[t1].key = txn[t2].key)
            => AtLeast(txn[t1].read, CommitVersion(t2)) \/ AtLeast(txn[t2].read, CommitVersion(t1))

(* No commit without floor(Total / 2) + 1 PREPARED members of the total   *)
(* registered membership.                                                 *)
QuorumOnTotal ==
    \A t \in Txns : decision[t] = "commit" =>
        /\ Cardinality(decidedWith[t]) >= QuorumSize
        /\ decidedWith[t] \subseteq Members

(* Never committed on one member and aborted on another. *)
CommittedOn(m, t) == \E o \in Members : \E i \in 1..vclock[m][o] : rows[o][i].txn = t
NoSplitDecision ==
    \A t \in Txns :
        ~((decision[t] = "commit" \/ \E m \in Members : CommittedOn(m, t))
          /\ (decision[t] = "abort" \/ \E m \in Members : t \in aborted[m]))

(* On every origin, LSN order is commit-stamp order. *)
LsnOrderIsHlcOrder ==
    \A o \in Members : \A i, j \in DOMAIN rows[o] : i < j => rows[o][i].hlc < rows[o][j].hlc

(* Aborts never consume an LSN: the WAL of an origin holds only ONE rows  *)
(* and committed transactions, each once, gap-free.                       *)
AbortsTakeNoLsn ==
    \A o \in Members : \A i \in DOMAIN rows[o] :
        /\ rows[o][i].lsn = i
        /\ rows[o][i].txn # ONE => decision[rows[o][i].txn] = "commit"

(* Transactions are interchangeable (members are not: their ids break     *)
(* version ties), so safety runs may use this symmetry.                   *)
Symmetry == Permutations(Txns)

-----------------------------------------------------------------------------
(* Liveness *)

(* A committed transaction's row is eventually applied on every member. *)
DecidedEventuallyApplied ==
    \A t \in Txns : decision[t] = "commit" ~> \A m \in Members : CommittedOn(m, t)

(* No intent is held forever. *)
IntentsEventuallyReleased ==
    \A m \in Members, k \in Keys : intent[m][k] # NoTxn ~> intent[m][k] = NoTxn

=============================================================================
