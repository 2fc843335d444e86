---------------------------- MODULE TombstonePurge ----------------------------
(***************************************************************************)
(* Purging tombstones (docs/design/README.md §4.2 and §4.8): when may a    *)
(* member forget the tombstone a delete left in `_rs_version`, so that a   *)
(* late row can never bring the deleted row back?                          *)
(*                                                                         *)
(* Every member takes writes; rows stream between members in per-origin    *)
(* LSN order and are applied once, merging by last-writer-wins on (hlc,    *)
(* origin) with tombstones, as in VClockReplication. A row written by      *)
(* member M before M applied a delete T can carry an older version than T  *)
(* and still be on its way to a member that purged T: with no stored       *)
(* version left, it is applied there, and the deleted row comes back on    *)
(* that member only. What bounds such rows is the HLC receive rule: once M *)
(* applied T its clock is at or past T's stamp, so every row M writes      *)
(* afterwards is newer than T and may rightly win. The older rows are      *)
(* those M wrote before it applied T, and their LSNs are at most M's own   *)
(* LSN in any vclock M acknowledged that covers T.                         *)
(*                                                                         *)
(* The rule (Observed; the core's PurgeHorizon.observed), in epochs: a     *)
(* member p keeps one pending epoch [bound, waitFor]. At a pass it takes   *)
(* the horizon H, the componentwise minimum of every member's acknowledged *)
(* vclock as p knows it (its own vclock for itself), and W, each member's  *)
(* own LSN in that same acknowledgement. If H covers the pending epoch's   *)
(* waitFor, p purges every tombstone written by a row under the epoch's    *)
(* bound, and the next epoch starts with bound H and waitFor W (unless H   *)
(* is the bound just finished: nothing new). Phase one (T under H): every  *)
(* member had applied T when it sent the acknowledgement p holds, so W     *)
(* bounds the LSN of every row older than T (WaitForCoversOlderRows).      *)
(* Phase two (H covers W, so p's own vclock does): p has applied every     *)
(* such row, and apply-once drops a copy arriving later                    *)
(* (PurgedKeysCovered, NoResurrection).                                    *)
(*                                                                         *)
(* Abstractions: no crashes; an acknowledgement is the member's vclock     *)
(* when it is sent (the code acknowledges its fsynced vclock, which no     *)
(* crash takes back), heard by p late by any amount, never ahead. The      *)
(* network is reliable and p applies the next row of any origin whichever  *)
(* member relays it, in any order across origins: rows need not arrive in  *)
(* causal order (real relays stream a whole log in order, so this is more  *)
(* than they do; VClockReplication checks relays, loss, duplicates and     *)
(* crashes). A row changes one key; a delete needs a live row to delete (a *)
(* DELETE of nothing captures no change). A stored version keeps the LSN   *)
(* of the row that wrote it; the storage keeps only (hlc, origin) today    *)
(* (docs/design/tombstone-purge.md). Membership is fixed; latent images of *)
(* unique-index losers are not modelled.                                   *)
(*                                                                         *)
(* Variants replace one piece of the rule by a cfg substitution. Wrong,    *)
(* each breaking NoResurrection: TombstonePurge_OneHorizon purges what     *)
(* every member holds (one phase); _CurrentBound purges under the horizon  *)
(* of the pass that ends the epoch instead of the epoch's bound;           *)
(* _HorizonWait waits for the horizon's components instead of each         *)
(* member's own LSN. Correct: _LocalWait waits for the purging member's    *)
(* own vclock only; _OwnBound bounds epochs by the purging member's own    *)
(* vclock (names rows whose stamps it knows), armed once the horizon       *)
(* covers it.                                                              *)
(***************************************************************************)

EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Members,    \* instance ids, e.g. {1, 2, 3}; the order breaks LWW ties
    Keys,       \* primary keys of the one replicated table
    Values,     \* column values
    Writers,    \* the members clients write to (Members, or fewer for small runs)
    Purgers,    \* the members that purge (Members, or fewer for small runs)
    MaxWrites   \* bound on client writes (all members together)

ASSUME Members \subseteq Nat /\ 0 \notin Members
ASSUME Writers \subseteq Members /\ Purgers \subseteq Members
ASSUME MaxWrites \in Nat

DELETE == "DELETE"    \* the value a delete writes: a tombstone
NoVersion == [val |-> "none", hlc |-> 0, origin |-> 0, lsn |-> 0]

VARIABLES
    rows,     \* every row written so far: [origin, lsn, hlc, key, val]
    vclock,   \* vclock[m][o]: m applied rows o:1 .. o:vclock[m][o], and no other of o
    tbl,      \* tbl[m][k]: the version m stores for k (NoVersion: none, or purged)
    hlc,      \* hlc[m]: the last stamp m's clock issued or received
    acked,    \* acked[p][m]: the vclock m acknowledged, as p last heard it (m # p)
    epoch,    \* epoch[p]: p's pending purge epoch [bound, waitFor, armed]
    writes    \* client writes so far

vars == <<rows, vclock, tbl, hlc, acked, epoch, writes>>

-----------------------------------------------------------------------------
(* Helpers *)

Max2(a, b) == IF a >= b THEN a ELSE b
Min(S) == CHOOSE x \in S : \A y \in S : x <= y
EmptyClock == [o \in Members |-> 0]
Covers(c, d) == \A o \in Members : c[o] >= d[o]

(* Version order: (hlc, origin), lexicographic. *)
Newer(a, b) == a.hlc > b.hlc \/ (a.hlc = b.hlc /\ a.origin > b.origin)
VersionOf(r) == [val |-> r.val, hlc |-> r.hlc, origin |-> r.origin, lsn |-> r.lsn]

(* The rows m applied: a prefix of every origin's LSNs. *)
Held(m) == {r \in rows : r.lsn <= vclock[m][r.origin]}

(* What last-writer-wins over a set of rows says about key k. *)
Lww(S, k) ==
    LET touching == {r \in S : r.key = k}
    IN IF touching = {} THEN NoVersion
       ELSE VersionOf(CHOOSE r \in touching : \A s \in touching : r = s \/ Newer(r, s))

(* What a client reads: a value, or nothing (no version, or a tombstone).  *)
Visible(v) == IF v.val \in Values THEN v.val ELSE "absent"

(* Upsert if newer: a row applies when its version is newer than the       *)
(* stored one (one row per (origin, lsn), so never equal); a delete stores *)
(* a tombstone.  With no stored version (never any, or purged) it applies. *)
ApplyRow(t, r) ==
    IF Newer(r, t[r.key]) THEN [t EXCEPT ![r.key] = VersionOf(r)] ELSE t

(* A tombstone is under a bound when the row that wrote it is. *)
Under(v, bound) == v.val = DELETE /\ v.lsn <= bound[v.origin]
PurgeUnder(t, bound) == [k \in Keys |-> IF Under(t[k], bound) THEN NoVersion ELSE t[k]]

(* The vclock p takes for m: its own, or the last acknowledgement it heard *)
Known(p, m) == IF m = p THEN vclock[p] ELSE acked[p][m]

(* The set-wide horizon as p sees it. *)
Horizon(p) == [o \in Members |-> Min({Known(p, m)[o] : m \in Members})]

(* The pieces of the rule, named so that the variants can replace them.    *)
(* EpochDone: may p purge under the pending epoch's bound now?             *)
EpochDone(p, H) == Covers(H, epoch[p].waitFor)
(* The purging member's own vclock covers waitFor: enough for it alone     *)
(* (TombstonePurge_LocalWait, EpochDone <- LocalWaitDone).                 *)
LocalWaitDone(p, H) == Covers(vclock[p], epoch[p].waitFor)
(* PurgeBound: the tombstones under what go. *)
PurgeBound(p, H) == epoch[p].bound
(* NextWaitFor: what the next epoch waits for: each member's own LSN in    *)
(* the acknowledgement that also gives H.                                  *)
NextWaitFor(p, H) == [m \in Members |-> Known(p, m)[m]]
(* NextEpoch: the epoch a finished one is followed by: bound H, armed      *)
(* (waitFor taken now, with H).                                            *)
NextEpoch(p, H) == [bound |-> H, waitFor |-> NextWaitFor(p, H), armed |-> TRUE]
(* Bound by p's own vclock instead (TombstonePurge_OwnBound, NextEpoch <-  *)
(* OwnBoundEpoch): a bound the storage can turn into stamps without        *)
(* keeping LSNs in versions (p holds the rows it names: their stamps are   *)
(* known); the epoch is armed once the horizon covers the bound.           *)
OwnBoundEpoch(p, H) == [bound |-> vclock[p], waitFor |-> EmptyClock, armed |-> FALSE]

-----------------------------------------------------------------------------
(* Actions *)

Init ==
    /\ rows = {}
    /\ vclock = [m \in Members |-> EmptyClock]
    /\ tbl = [m \in Members |-> [k \in Keys |-> NoVersion]]
    /\ hlc = [m \in Members |-> 0]
    /\ acked = [p \in Members |-> [m \in Members \ {p} |-> EmptyClock]]
    /\ epoch = [p \in Members |-> [bound |-> EmptyClock, waitFor |-> EmptyClock, armed |-> TRUE]]
    /\ writes = 0

(* A client writes v (a value, or DELETE) to key k on m: the next LSN of   *)
(* m's origin and a stamp above m's clock and above the stored version of  *)
(* k (docs/design/README.md §4.2; the receive rule already keeps the clock *)
(* above it).                                                              *)
LocalWrite(m, k, v) ==
    /\ m \in Writers
    /\ writes < MaxWrites
    /\ v = DELETE => tbl[m][k].val \in Values
    /\ LET r == [origin |-> m, lsn |-> vclock[m][m] + 1,
                 hlc |-> Max2(hlc[m], tbl[m][k].hlc) + 1, key |-> k, val |-> v]
       IN /\ rows' = rows \cup {r}
          /\ vclock' = [vclock EXCEPT ![m][m] = r.lsn]
          /\ tbl' = [tbl EXCEPT ![m] = ApplyRow(@, r)]
          /\ hlc' = [hlc EXCEPT ![m] = r.hlc]
    /\ writes' = writes + 1
    /\ UNCHANGED <<acked, epoch>>

(* p applies the next row of origin o (relayed by whichever member holds   *)
(* it): apply-once in LSN order.  The receive rule pushes p's clock past   *)
(* the row's stamp.                                                        *)
Apply(p, o) ==
    /\ o # p
    /\ \E r \in rows :
         /\ r.origin = o /\ r.lsn = vclock[p][o] + 1
         /\ vclock' = [vclock EXCEPT ![p][o] = r.lsn]
         /\ tbl' = [tbl EXCEPT ![p] = ApplyRow(@, r)]
         /\ hlc' = [hlc EXCEPT ![p] = Max2(@, r.hlc)]
    /\ UNCHANGED <<rows, acked, epoch, writes>>

(* p hears m's acknowledgement: m's vclock now.  p's knowledge lags by     *)
(* any number of steps (acknowledgements not heard yet).  Only a member    *)
(* that purges reads acknowledgements here.                                *)
Ack(m, p) ==
    /\ m # p /\ p \in Purgers
    /\ acked[p][m] # vclock[m]
    /\ acked' = [acked EXCEPT ![p][m] = vclock[m]]
    /\ UNCHANGED <<rows, vclock, tbl, hlc, epoch, writes>>

(* A purge pass on p (PurgeHorizon.observed).  When the pending epoch is   *)
(* done, p purges under its bound, and the next epoch starts from this     *)
(* pass's horizon and acknowledgements, unless its bound would be the one  *)
(* just finished (nothing new to purge: the finished epoch stays, done).   *)
(* An epoch that is not armed yet (the own-vclock rule of                  *)
(* TombstonePurge_OwnBound; the rule above starts every epoch armed)       *)
(* first waits for the horizon to cover its bound, then takes waitFor      *)
(* from the acknowledgements that gave that horizon.                       *)
Observed(p) ==
    LET H == Horizon(p)
        e == epoch[p]
    IN /\ p \in Purgers
       /\ IF e.armed
          THEN /\ EpochDone(p, H)
               /\ tbl' = [tbl EXCEPT ![p] = PurgeUnder(@, PurgeBound(p, H))]
               /\ epoch' = [epoch EXCEPT ![p] = NextEpoch(p, H)]
               /\ tbl' # tbl \/ NextEpoch(p, H).bound # e.bound
          ELSE /\ Covers(H, e.bound)
               /\ epoch' = [epoch EXCEPT ![p] =
                               [e EXCEPT !.waitFor = NextWaitFor(p, H), !.armed = TRUE]]
               /\ UNCHANGED tbl
       /\ UNCHANGED <<rows, vclock, hlc, acked, writes>>

(* The end of a run: every write made and applied everywhere, every        *)
(* acknowledgement heard, no pass with anything left to do.  Any other     *)
(* state without a successor is a deadlock.                                *)
Quiet ==
    /\ writes = MaxWrites
    /\ \A m1, m2 \in Members : vclock[m1] = vclock[m2]
    /\ \A p \in Purgers : \A m \in Members \ {p} : acked[p][m] = vclock[m]
    /\ \A p \in Purgers : ~ENABLED Observed(p)

Terminated == Quiet /\ UNCHANGED vars

Next ==
    \/ \E m \in Members, k \in Keys, v \in Values \cup {DELETE} : LocalWrite(m, k, v)
    \/ \E p, o \in Members : Apply(p, o) \/ Ack(p, o)
    \/ \E p \in Members : Observed(p)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants *)

Version == [val : Values \cup {DELETE, "none"}, hlc : Nat, origin : Members \cup {0}, lsn : Nat]
Row == [origin : Members, lsn : Nat \ {0}, hlc : Nat \ {0}, key : Keys, val : Values \cup {DELETE}]

TypeOK ==
    /\ rows \subseteq Row
    /\ vclock \in [Members -> [Members -> Nat]]
    /\ tbl \in [Members -> [Keys -> Version]]
    /\ hlc \in [Members -> Nat]
    /\ \A p \in Members : \A m \in Members \ {p} : acked[p][m] \in [Members -> Nat]
    /\ \A p \in Members :
         epoch[p] \in [bound : [Members -> Nat], waitFor : [Members -> Nat], armed : BOOLEAN]
    /\ writes \in 0..MaxWrites

(* No late row brings a deleted row back: what a member shows for every    *)
(* key is what last-writer-wins over every row it applied says (a purged   *)
(* tombstone shows nothing, as the tombstone did).                         *)
NoResurrection ==
    \A m \in Members, k \in Keys : Visible(tbl[m][k]) = Visible(Lww(Held(m), k))

(* The same for the stored versions: a member stores what last-writer-     *)
(* wins says, or nothing where that is a tombstone it purged.              *)
StoredIsLwwOrPurged ==
    \A m \in Members, k \in Keys :
        \/ tbl[m][k] = Lww(Held(m), k)
        \/ tbl[m][k] = NoVersion /\ Lww(Held(m), k).val = DELETE

(* Members that applied the same rows show the same table.                 *)
EqualVClocksEqualTables ==
    \A m1, m2 \in Members :
        vclock[m1] = vclock[m2] => \A k \in Keys : Visible(tbl[m1][k]) = Visible(tbl[m2][k])

(* The exact condition a purge needs, kept ever after: where p purged the  *)
(* tombstone of k (it stores nothing but applied rows of k), every row of  *)
(* k that exists anywhere and is older than that tombstone is applied on   *)
(* p already, so apply-once drops any copy still on its way.               *)
PurgedKeysCovered ==
    \A p \in Members, k \in Keys :
        LET t == Lww(Held(p), k)
        IN (tbl[p][k] = NoVersion /\ t # NoVersion) =>
               \A r \in rows : (r.key = k /\ Newer(t, r)) => r \in Held(p)

(* Phase one: for every tombstone under the bound of a pending epoch that  *)
(* is armed, each member's rows older than it have LSNs within waitFor.    *)
WaitForCoversOlderRows ==
    \A p \in Members : epoch[p].armed =>
        \A d \in rows :
            (d.val = DELETE /\ d.lsn <= epoch[p].bound[d.origin]) =>
                \A r \in rows :
                    (r.key = d.key /\ Newer(d, r)) => r.lsn <= epoch[p].waitFor[r.origin]

(* The receive rule: a member's clock is at or past every version it       *)
(* stores and every row it applied.                                        *)
VersionsBelowClock ==
    \A m \in Members : \A r \in Held(m) : r.hlc <= hlc[m]

(* Each origin's stamps increase with its LSNs: a bound in LSNs and a      *)
(* bound in stamps (per origin, the stamp of the row at the bound) name    *)
(* the same tombstones, which is what lets the storage compare stamps.     *)
HlcFollowsLsn ==
    \A r, s \in rows : (r.origin = s.origin /\ r.lsn < s.lsn) => r.hlc < s.hlc

(* Acknowledgements are never ahead of the member that sent them.          *)
AcksNotAhead ==
    \A p \in Members : \A m \in Members \ {p} : Covers(vclock[m], acked[p][m])

(* The rule is not vacuous (never purging would satisfy every invariant    *)
(* above): once writes stop and every row and acknowledgement has arrived, *)
(* passes purge every tombstone.                                           *)
PurgeCompletes ==
    Quiet => \A p \in Purgers, k \in Keys : tbl[p][k].val # DELETE

(* Keys and values are interchangeable (members are not: ids break ties).  *)
Symmetry == Permutations(Keys) \cup Permutations(Values)
=============================================================================
