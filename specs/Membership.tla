------------------------------- MODULE Membership -------------------------------
(***************************************************************************)
(* Instance ids and the registered membership (docs/design/README.md §4.7, *)
(* and the quorum size of §4.5 across membership changes).                 *)
(*                                                                         *)
(* The _cluster table maps ids to instance uuids.  Only a registrar        *)
(* changes it, and there is one registrar (the member that bootstrapped    *)
(* the set) until registration becomes a quorum write.  A change is a WAL  *)
(* row of the registrar's origin: Join allocates the smallest id never     *)
(* used in the registrar's view and sends the joiner a snapshot of that    *)
(* view; Remove retires an instance's id.  Members apply the registrar's   *)
(* changes in order (Replicate), so their views lag.  A joiner takes       *)
(* writes (Activate) only once its _cluster row is held by a majority of   *)
(* the registered members; an OS crash of the registrar loses the changes  *)
(* no other member holds (it recovers the rest from its peers, as in       *)
(* VClockReplication), and such a lost allocation never had a writer.      *)
(*                                                                         *)
(* Rules of the registrar design this spec models                          *)
(* (docs/design/membership.md; registration is now leaderless,             *)
(* specs/MembershipQuorum.tla):                                            *)
(*  1. one registrar allocates ids;                                         *)
(*  2. an id is never allocated twice in a replica set, even after its     *)
(*     instance was removed (a new instance with an old id would have its   *)
(*     rows taken for copies of the old instance's);                       *)
(*  3. each change adds or removes one member, and the next change starts   *)
(*     only once the previous one is held by every member of the            *)
(*     configuration after the next change (the joiner excepted: its        *)
(*     snapshot holds it), so the views of registered members are never    *)
(*     more than one change apart and their majorities intersect;          *)
(*  4. quorums are counted on one's own view of the registered members,    *)
(*     and a participant refuses a PREPARE from a coordinator its view      *)
(*     does not list (a removed member that has not heard of its removal   *)
(*     is not counted here).                                                *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
    Instances,   \* instance uuids (model values)
    Bootstrap,   \* the instance that bootstrapped the set (id 1)
    Registrars,  \* the instances that allocate ids: {Bootstrap}
    MaxChanges,  \* bound on membership changes
    MaxCrashes   \* bound on registrar OS crashes

ASSUME Bootstrap \in Instances /\ Registrars \subseteq Instances
ASSUME MaxChanges \in Nat /\ MaxCrashes \in Nat

Ids == 1..Cardinality(Instances) + MaxChanges
Boot == [op |-> "add", id |-> 1, inst |-> Bootstrap]

VARIABLES
    held,      \* held[m][r]: m's copy of registrar r's _cluster changes (r's own is its log)
    joined,    \* instances that received a snapshot (they have a view)
    active,    \* instances taking writes
    status,    \* status[m]: "up" | "down"
    changes,   \* membership changes so far
    crashes    \* registrar crashes so far

vars == <<held, joined, active, status, changes, crashes>>

Log(r) == held[r][r]

-----------------------------------------------------------------------------
(* Rules the implementation follows; each wrong variant replaces one.      *)

(* Rule 3: the previous change of r is held by every member of `next`,    *)
(* the configuration after this change (the joiner j excepted).           *)
PreviousChangeHeld(r, next, j) ==
    \A m \in next \ {j} : m \in joined /\ held[m][r] = Log(r)

(* A _cluster change is fsynced before the joiner hears of it, whatever    *)
(* wal_mode says: an OS crash of the registrar never loses one.           *)
ChangesDurable == TRUE

-----------------------------------------------------------------------------
Range(s) == {s[i] : i \in DOMAIN s}
IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(t, 1, Len(s)) = s

(* The changes m holds, from every registrar, and what they say. *)
Held(m) == {Boot} \cup UNION {Range(held[m][r]) : r \in Registrars}
Adds(m) == {c \in Held(m) : c.op = "add"}
Removed(m) == {c.id : c \in {d \in Held(m) : d.op = "remove"}}
View(m) == {c \in Adds(m) : c.id \notin Removed(m)}           \* the live _cluster rows
MembersOf(m) == {c.inst : c \in View(m)}
UsedIds(m) == {c.id : c \in Adds(m)}                           \* never reused
IdOf(m) == {c.id : c \in {d \in View(m) : d.inst = m}}

Majorities(S) == {Q \in SUBSET S : 2 * Cardinality(Q) > Cardinality(S)}

(* The registered members, as the registrars see them. *)
Registered == UNION {MembersOf(r) : r \in Registrars \cap joined}

Init ==
    /\ held = [m \in Instances |-> [r \in Registrars |-> <<>>]]
    /\ joined = {Bootstrap}
    /\ active = {Bootstrap}
    /\ status = [m \in Instances |-> "up"]
    /\ changes = 0
    /\ crashes = 0

(* Registrar r registers joiner j: the smallest id never used in r's view; *)
(* j receives a snapshot of r's view (its own row included).               *)
Join(r, j) ==
    /\ r \in Registrars /\ r \in joined /\ status[r] = "up"
    /\ j \notin joined /\ changes < MaxChanges
    /\ PreviousChangeHeld(r, MembersOf(r) \cup {j}, j)
    /\ LET id == CHOOSE i \in Ids \ UsedIds(r) : \A k \in Ids \ UsedIds(r) : i <= k
           copy == [held[r] EXCEPT ![r] = Append(@, [op |-> "add", id |-> id, inst |-> j])]
       IN held' = [held EXCEPT ![r] = copy, ![j] = copy]
    /\ joined' = joined \cup {j}
    /\ status' = [status EXCEPT ![j] = "up"]
    /\ changes' = changes + 1
    /\ UNCHANGED <<active, crashes>>

(* Registrar r removes member x; x's id is retired, never allocated again. *)
Remove(r, x) ==
    /\ r \in Registrars /\ r \in joined /\ status[r] = "up"
    /\ x \in MembersOf(r) /\ x # r /\ changes < MaxChanges
    /\ PreviousChangeHeld(r, MembersOf(r) \ {x}, r)
    /\ LET c == CHOOSE c \in View(r) : c.inst = x
       IN held' = [held EXCEPT ![r][r] = Append(@, [op |-> "remove", id |-> c.id, inst |-> x])]
    /\ changes' = changes + 1
    /\ UNCHANGED <<joined, active, status, crashes>>

(* m copies registrar r's next change (relay and applier).  A copy that   *)
(* is no longer a prefix of r's log (r lost rows and wrote others) is a   *)
(* split brain: SUBSCRIBE refuses it and nothing more is copied.          *)
Replicate(m, r) ==
    /\ m \in joined /\ status[m] = "up" /\ m # r /\ status[r] = "up"
    /\ Len(held[m][r]) < Len(Log(r)) /\ IsPrefix(held[m][r], Log(r))
    /\ held' = [held EXCEPT ![m][r] = Append(@, Log(r)[Len(@) + 1])]
    /\ UNCHANGED <<joined, active, status, changes, crashes>>

(* A joiner takes writes once its _cluster row is held by a majority of    *)
(* the registered members, as its registrar counts them (the joiner's own *)
(* copy counts: in a set of two, nobody else could hold it).              *)
Activate(j) ==
    /\ j \in joined \ active /\ status[j] = "up"
    /\ \E r \in Registrars :
         \E c \in View(r) :
            /\ c.inst = j
            /\ LET holders == {m \in MembersOf(r) : m \in joined /\ c \in Held(m)}
               IN 2 * Cardinality(holders) > Cardinality(MembersOf(r))
    /\ active' = active \cup {j}
    /\ UNCHANGED <<held, joined, status, changes, crashes>>

(* The members registrar r knows of from the first k entries of its log. *)
KnownAfter(r, k) ==
    LET rows == {Boot} \cup Range(SubSeq(Log(r), 1, k))
    IN {c.inst : c \in {d \in rows : d.op = "add"}}
       \ {c.inst : c \in {d \in rows : d.op = "remove"}}

(* The recovery fetch after an OS crash (VClockReplication): ask every     *)
(* member the surviving log names for the registrar's rows, then whoever  *)
(* those rows name, until nothing new comes.                              *)
RECURSIVE Fetched(_, _)
Fetched(r, k) ==
    LET got == {Len(held[m][r]) : m \in (KnownAfter(r, k) \cap joined) \ {r}} \cup {k}
        top == CHOOSE x \in got : \A y \in got : y <= x
    IN IF top = k THEN k ELSE Fetched(r, top)

(* An OS crash of registrar r under wal_mode = write: unless changes are  *)
(* fsynced, it keeps some prefix of its log, then gets back what the      *)
(* members it still knows of hold.  Everyone else keeps its copy.         *)
OsCrash(r) ==
    /\ r \in Registrars /\ status[r] = "up" /\ crashes < MaxCrashes
    /\ \E d \in (IF ChangesDurable THEN {Len(Log(r))} ELSE 0..Len(Log(r))) :
         held' = [held EXCEPT ![r][r] = SubSeq(@, 1, Fetched(r, d))]
    /\ status' = [status EXCEPT ![r] = "down"]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<joined, active, changes>>

Restart(m) ==
    /\ status[m] = "down"
    /\ status' = [status EXCEPT ![m] = "up"]
    /\ UNCHANGED <<held, joined, active, changes, crashes>>

(* The end of a run: no change, copy or activation is possible any more. *)
(* Any other state without a successor is a deadlock.                    *)
Terminated ==
    /\ \A m \in Instances : status[m] = "up"
    /\ ~\E r \in Registrars, i \in Instances : ENABLED (Join(r, i) \/ Remove(r, i))
    /\ ~\E m \in Instances, r \in Registrars : ENABLED Replicate(m, r)
    /\ ~\E j \in Instances : ENABLED Activate(j)
    /\ UNCHANGED vars

Next ==
    \/ \E r \in Registrars, i \in Instances : Join(r, i) \/ Remove(r, i) \/ OsCrash(r)
    \/ \E m \in Instances, r \in Registrars : Replicate(m, r)
    \/ \E m \in Instances : Activate(m) \/ Restart(m)
    \/ Terminated

Spec == Init /\ [][Next]_vars

(* Instances other than the bootstrap are interchangeable. *)
Symmetry == Permutations(Instances \ {Bootstrap})

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ joined \subseteq Instances /\ active \subseteq joined
    /\ status \in [Instances -> {"up", "down"}]

(* No id names two instances: within every view an id has one instance    *)
(* and an instance one id; the registrars, the registered members and the *)
(* instances taking writes agree on every id they know; two instances     *)
(* taking writes never share an id.                                        *)
Relevant == (Registered \cup active \cup Registrars) \cap joined
UniqueIds ==
    /\ \A m \in joined : \A c, d \in View(m) : (c.id = d.id) <=> (c.inst = d.inst)
    /\ \A m1, m2 \in Relevant : \A c \in Adds(m1), d \in Adds(m2) :
           (c.id = d.id) => (c.inst = d.inst)
    /\ \A m1, m2 \in active : m1 # m2 => IdOf(m1) \cap IdOf(m2) = {}

(* Any majority of one registered member's view and any majority of      *)
(* another's intersect: with rule 3, views are at most one change apart.  *)
QuorumsIntersect ==
    \A m1, m2 \in Registered \cap joined :
        \A q1 \in Majorities(MembersOf(m1)), q2 \in Majorities(MembersOf(m2)) : q1 \cap q2 # {}

(* The views of registered members differ by at most one member, so      *)
(* quorums of floor(n / 2) + 1 on either intersect.                        *)
OneChangeAtATime ==
    \A m1, m2 \in Registered \cap joined :
        Cardinality((MembersOf(m1) \ MembersOf(m2)) \cup (MembersOf(m2) \ MembersOf(m1))) <= 1

=============================================================================
