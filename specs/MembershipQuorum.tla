--------------------------- MODULE MembershipQuorum ---------------------------
(***************************************************************************)
(* Leaderless registration: a joiner's _cluster row is written by a QUORUM *)
(* transaction that any registered member may coordinate, beside QUORUM    *)
(* data transactions, with the quorum of both counted on the coordinator's *)
(* view of the registered members (floor(n / 2) + 1).                      *)
(*                                                                         *)
(* Transactions are QuorumCommit's 2PC: the coordinator reads the version  *)
(* of the key and fixes the member set (its view) at Begin; a participant  *)
(* answers CONFLICT on a live intent or a stored version other than the    *)
(* one read, else places an intent and answers PREPARED; the coordinator   *)
(* decides COMMIT with a quorum of the member set, or ABORT while          *)
(* undecided; a participant never aborts on its own; a committed row      *)
(* reaches every member eventually, in any order (ApplyRow), is applied    *)
(* last-writer-wins by commit stamp, and releases the intent.              *)
(*                                                                         *)
(* Changing the member set under running transactions loses updates: a   *)
(* joiner holds none of the intents, and none of the rows its snapshot    *)
(* missed, of transactions decided by a quorum of an older view, while a   *)
(* quorum of the new view need not meet that old quorum once the view has *)
(* grown by two (docs/design/membership_quorum.md has the traces).  The   *)
(* rules that close it:                                                    *)
(*  R1 view check: a participant answers PREPARED only if the member set  *)
(*     the PREPARE carries equals its own current view (ViewCheck);       *)
(*  R2 membership barrier: a participant answers PREPARED to a membership  *)
(*     change only while it holds no pending transaction (prepared, not    *)
(*     finished: row applied or abort learned) whose member set differs    *)
(*     from its current view (NoPendingFromOtherView);                    *)
(*  R3 joiner catch-up: each PREPARED answer to a membership change        *)
(*     carries the rows the voter holds (its vclock); the joiner is given  *)
(*     their union as a barrier and answers no PREPARE before it holds    *)
(*     it (CaughtUp);                                                      *)
(*  R4 one change at a time: a membership change is a transaction on the   *)
(*     reserved key _cluster, whose version is the membership itself; it   *)
(*     conflicts like any key.  Ids are never reused.                      *)
(*                                                                         *)
(* Abstracted: one data key; values (a version is the transaction that     *)
(* wrote it; the version of _cluster is the change that wrote it, which    *)
(* names one membership because each joiner is registered by at most one  *)
(* transaction); commit stamps (one global counter: above every version    *)
(* read, as the HLC stamp is); LSNs and origins (a committed row is        *)
(* copied to each member once, in any order); crashes, timeouts and the    *)
(* question protocol (QuorumCommit's business: here a participant learns  *)
(* an abort when it happens, ParticipantAbort); removals; ONE writes.     *)
(* Messages may be lost or late: a PREPARE is answered at any time before  *)
(* the decision, or never.                                                 *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Instances,    \* instance uuids (model values)
    Bootstrapped, \* the registered members at the start (ids 1..n)
    Txns,         \* data QUORUM transactions (model values); each begins at most once
    Registrars    \* the members that may coordinate a registration: all of them,
                  \* leaderless (one, the registrar, in MembershipQuorum_Registrar)

Joiners == Instances \ Bootstrapped
(* The registration of joiner j is the transaction named j: one attempt   *)
(* per joiner.                                                             *)
AllTxns == Txns \cup Joiners

ASSUME Bootstrapped \subseteq Instances /\ Bootstrapped # {}
ASSUME Registrars \subseteq Instances /\ Txns \cap Instances = {}

DataKey == "k"
ClusterKey == "_cluster"
Keys == {DataKey, ClusterKey}
NoTxn == "none"
NoInst == "nobody"
V0 == "v0"        \* the version of every key at the start (for _cluster: Bootstrapped)

VARIABLES
    joined,   \* instances with a state: the bootstrapped ones and the joiners that joined
    stored,   \* stored[m][k]: the version of k on m (V0 or the transaction that wrote it)
    intent,   \* intent[m][k]: the transaction whose intent holds k on m, or NoTxn
    applied,  \* applied[m]: the committed transactions whose row m applied (its vclock)
    txn,      \* txn[t]: [coord, key, read, members, val]; coord = NoInst until t begins
    votes,    \* votes[t]: members that answered PREPARED
    carried,  \* carried[j]: union of the rows the PREPARED answers to registration j carried (R3)
    decision, \* decision[t]: "none" | "commit" | "abort"
    stamp,    \* stamp[t]: commit stamp, 0 until committed
    barrier   \* barrier[j]: rows joiner j must hold before it answers PREPARED (R3)

vars == <<joined, stored, intent, applied, txn, votes, carried, decision, stamp, barrier>>

-----------------------------------------------------------------------------
(* Views.  The membership value of a registration is the set of pairs     *)
(* <<id, instance>> of the joiners registered so far, its own included;    *)
(* the bootstrapped members are in every view with ids 1..n, so joiners'  *)
(* ids start at n + 1.                                                     *)

Members(val) == Bootstrapped \cup {x[2] : x \in val}
NextId(val) == Cardinality(Bootstrapped) + Cardinality(val) + 1   \* never used: no removal

Value(m) == IF stored[m][ClusterKey] = V0 THEN {} ELSE txn[stored[m][ClusterKey]].val
View(m) == Members(Value(m))       \* m's view of the registered members

Begun(t) == txn[t].coord # NoInst
Quorum(S) == Cardinality(S) \div 2 + 1
StampOf(v) == IF v = V0 THEN 0 ELSE stamp[v]

(* Prepared and not finished at m: its intent is still held. *)
Pending(m) == {intent[m][k] : k \in Keys} \ {NoTxn}

-----------------------------------------------------------------------------
(* The rules; each wrong variant replaces one.                             *)

(* R1: the transaction's member set is m's current view. *)
ViewCheck(m, t) == txn[t].members = View(m)

(* R2: to vote a membership change, m holds no pending transaction from a  *)
(* view other than its current one.                                        *)
NoPendingFromOtherView(m) == \A u \in Pending(m) : txn[u].members = View(m)

(* R3: m holds the rows its registration's voters held. *)
CaughtUp(m) == barrier[m] \subseteq applied[m]

-----------------------------------------------------------------------------
Init ==
    /\ joined = Bootstrapped
    /\ stored = [m \in Instances |-> [k \in Keys |-> V0]]
    /\ intent = [m \in Instances |-> [k \in Keys |-> NoTxn]]
    /\ applied = [m \in Instances |-> {}]
    /\ txn = [t \in AllTxns |-> [coord |-> NoInst, key |-> DataKey, read |-> V0,
                                 members |-> {}, val |-> {}]]
    /\ votes = [t \in AllTxns |-> {}]
    /\ carried = [j \in Joiners |-> {}]
    /\ decision = [t \in AllTxns |-> "none"]
    /\ stamp = [t \in AllTxns |-> 0]
    /\ barrier = [j \in Instances |-> {}]

(* Apply committed row t, of commit stamp s, on m: last writer wins; the  *)
(* row releases t's intent.                                                *)
Apply(m, t, s) ==
    LET k == txn[t].key
    IN /\ stored' = [stored EXCEPT ![m][k] = IF s > StampOf(@) THEN t ELSE @]
       /\ intent' = [intent EXCEPT ![m][k] = IF @ = t THEN NoTxn ELSE @]
       /\ applied' = [applied EXCEPT ![m] = @ \cup {t}]

(* A client's data transaction t starts on member c: it reads the version *)
(* c stores and fixes the member set, c's view.                           *)
Begin(t, c) ==
    /\ t \in Txns /\ ~Begun(t) /\ c \in joined
    /\ txn' = [txn EXCEPT ![t] = [coord |-> c, key |-> DataKey, read |-> stored[c][DataKey],
                                  members |-> View(c), val |-> {}]]
    /\ UNCHANGED <<joined, stored, intent, applied, votes, carried, decision, stamp, barrier>>

(* Joiner j asks member r to register it: r begins a transaction on       *)
(* _cluster that reads r's membership and adds j with the next id.        *)
Register(j, r) ==
    /\ j \in Joiners /\ ~Begun(j) /\ j \notin joined
    /\ r \in Registrars /\ r \in joined /\ j \notin View(r)
    /\ txn' = [txn EXCEPT ![j] = [coord |-> r, key |-> ClusterKey,
                                  read |-> stored[r][ClusterKey], members |-> View(r),
                                  val |-> Value(r) \cup {<<NextId(Value(r)), j>>}]]
    /\ UNCHANGED <<joined, stored, intent, applied, votes, carried, decision, stamp, barrier>>

(* Member p answers PREPARED to t (the coordinator's own vote included):  *)
(* p is in t's member set, no live intent holds the key, the stored        *)
(* version is the one read, and R1-R3 allow it.  A PREPARED answer to a   *)
(* registration carries p's rows (R3).  CONFLICT, a refusal or a lost     *)
(* PREPARE is this action not happening.                                  *)
Prepare(p, t) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ p \in joined /\ p \in txn[t].members
    /\ LET k == txn[t].key
       IN /\ intent[p][k] = NoTxn
          /\ stored[p][k] = txn[t].read
          /\ ViewCheck(p, t)
          /\ k = ClusterKey => NoPendingFromOtherView(p)
          /\ CaughtUp(p)
          /\ intent' = [intent EXCEPT ![p][k] = t]
          /\ carried' = IF k = ClusterKey THEN [carried EXCEPT ![t] = @ \cup applied[p]]
                        ELSE carried
    /\ votes' = [votes EXCEPT ![t] = @ \cup {p}]
    /\ UNCHANGED <<joined, stored, applied, txn, decision, stamp, barrier>>

(* The coordinator decides COMMIT with a quorum of the member set fixed at *)
(* Begin; its row takes the next stamp and is applied there at once.      *)
DecideCommit(t) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ Cardinality(votes[t]) >= Quorum(txn[t].members)
    /\ LET s == Cardinality({u \in AllTxns : decision[u] = "commit"}) + 1
       IN /\ stamp' = [stamp EXCEPT ![t] = s]
          /\ Apply(txn[t].coord, t, s)
    /\ decision' = [decision EXCEPT ![t] = "commit"]
    /\ UNCHANGED <<joined, txn, votes, carried, barrier>>

(* The coordinator decides ABORT (a timeout, CONFLICT answers), releasing *)
(* its own intent.                                                        *)
DecideAbort(t) ==
    /\ Begun(t) /\ decision[t] = "none"
    /\ decision' = [decision EXCEPT ![t] = "abort"]
    /\ LET c == txn[t].coord
           k == txn[t].key
       IN intent' = [intent EXCEPT ![c][k] = IF @ = t THEN NoTxn ELSE @]
    /\ UNCHANGED <<joined, stored, applied, txn, votes, carried, stamp, barrier>>

(* ABORT reaches participant p: its intent goes, t is finished there. *)
ParticipantAbort(p, t) ==
    /\ decision[t] = "abort" /\ p \in joined
    /\ intent[p][txn[t].key] = t
    /\ intent' = [intent EXCEPT ![p][txn[t].key] = NoTxn]
    /\ UNCHANGED <<joined, stored, applied, txn, votes, carried, decision, stamp, barrier>>

(* Committed row t reaches member m (COMMIT, or replication from any      *)
(* member holding it), in any order with other rows.                      *)
ApplyRow(m, t) ==
    /\ m \in joined /\ decision[t] = "commit" /\ t \notin applied[m]
    /\ Apply(m, t, stamp[t])
    /\ UNCHANGED <<joined, txn, votes, carried, decision, stamp, barrier>>

(* Joiner j, registered, takes a snapshot of its registrar's committed    *)
(* rows and view (no intents) and the barrier of R3: the rows its         *)
(* registration's voters held.  It replicates the rest (ApplyRow).        *)
Join(j) ==
    /\ j \in Joiners /\ j \notin joined /\ decision[j] = "commit"
    /\ LET r == txn[j].coord
       IN /\ j \in View(r)
          /\ stored' = [stored EXCEPT ![j] = stored[r]]
          /\ applied' = [applied EXCEPT ![j] = applied[r]]
    /\ barrier' = [barrier EXCEPT ![j] = carried[j]]
    /\ joined' = joined \cup {j}
    /\ UNCHANGED <<intent, txn, votes, carried, decision, stamp>>

(* The end of a run: every transaction began and was decided, every       *)
(* registered joiner joined, every row is everywhere and no intent is     *)
(* left.  Any other state without a successor is a deadlock.              *)
Terminated ==
    /\ \A t \in AllTxns : Begun(t) /\ decision[t] # "none"
    /\ \A j \in Joiners : decision[j] = "commit" => j \in joined
    /\ \A m \in joined : \A t \in AllTxns : decision[t] = "commit" => t \in applied[m]
    /\ \A m \in joined : Pending(m) = {}
    /\ UNCHANGED vars

Next ==
    \/ \E t \in Txns, c \in Instances : Begin(t, c)
    \/ \E j \in Joiners, r \in Instances : Register(j, r)
    \/ \E p \in Instances, t \in AllTxns : Prepare(p, t) \/ ParticipantAbort(p, t)
                                         \/ ApplyRow(p, t)
    \/ \E t \in AllTxns : DecideCommit(t) \/ DecideAbort(t)
    \/ \E j \in Joiners : Join(j)
    \/ Terminated

Spec == Init /\ [][Next]_vars

(* Bootstrapped members are interchangeable (their ids are implicit), so   *)
(* are joiners and data transactions; with Registrars = Instances.         *)
Symmetry == {f @@ g @@ h : f \in Permutations(Bootstrapped),
                           g \in Permutations(Joiners),
                           h \in Permutations(Txns)}

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ Bootstrapped \subseteq joined /\ joined \subseteq Instances
    /\ \A m \in Instances : /\ stored[m] \in [Keys -> AllTxns \cup {V0}]
                            /\ intent[m] \in [Keys -> AllTxns \cup {NoTxn}]
                            /\ applied[m] \subseteq AllTxns
    /\ decision \in [AllTxns -> {"none", "commit", "abort"}]
    /\ \A t \in AllTxns : votes[t] \subseteq txn[t].members
    /\ \A t \in AllTxns : (decision[t] = "commit") <=> (stamp[t] > 0)

Committed(T) == {t \in T : decision[t] = "commit"}

(* No lost update on the data key: no two committed data transactions     *)
(* read the same version, so the committed writes form one chain, each    *)
(* reading its predecessor's.                                              *)
NoLostUpdate ==
    \A t1, t2 \in Committed(Txns) : t1 # t2 => txn[t1].read # txn[t2].read

(* The same for _cluster: no two membership changes committed from one    *)
(* view, so the views form one chain.                                      *)
OneChangePerView ==
    \A j1, j2 \in Committed(Joiners) : j1 # j2 => txn[j1].read # txn[j2].read

(* In every view held and every membership committed, an id names one     *)
(* instance and an instance has one id, above the bootstrapped ones; and  *)
(* no two views disagree on any id.                                        *)
Memberships == {Value(m) : m \in joined} \cup {txn[j].val : j \in Committed(Joiners)}
UniqueIds ==
    /\ \A v, w \in Memberships : \A x \in v, y \in w : (x[1] = y[1]) <=> (x[2] = y[2])
    /\ \A v \in Memberships : \A x \in v :
           x[1] > Cardinality(Bootstrapped) /\ x[2] \in Joiners
=============================================================================
