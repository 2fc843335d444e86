-------------------------- MODULE VClockReplication --------------------------
(***************************************************************************)
(* Replication of WAL rows between the members of a replica set            *)
(* (docs/design/README.md §4.2 to §4.4): every member takes writes, rows   *)
(* stream through a full mesh of relays and appliers over a network that   *)
(* drops, duplicates and reorders, and each member applies every (origin,  *)
(* lsn) exactly once, in LSN order per origin, merging rows by             *)
(* last-writer-wins on (hlc, origin) with tombstones.                      *)
(*                                                                         *)
(* Durability follows WalMode.  A group commit first queues rows in the    *)
(* writer's batch (they count in the pending vclock), then WalFlush writes *)
(* them to the WAL with one write (and one fsync under "fsync"), applies   *)
(* them to the table and acknowledges the clients.  A process crash        *)
(* (Crash) loses the batch only; an OS crash (OsCrash, "write" mode only)  *)
(* also loses any suffix of the WAL beyond its durable prefix.             *)
(*                                                                         *)
(* After an unclean stop under "write" a member restarts in the            *)
(* "recovering" state: it fetches the rows of its own origin from every    *)
(* other member (RecoveryAnswer) and takes writes only once every member   *)
(* has answered (RecoveryFinish), so it never reuses an LSN a peer holds.  *)
(* A member that answers also fences the recovering origin: rows of an     *)
(* older incarnation (epoch) beyond what it answered are refused, first up *)
(* to its own answer, then (FenceRaise) up to the point where the          *)
(* recovering member resumed.  Without the fence, a row still in flight    *)
(* from the crashed incarnation reaches a member after it answered and     *)
(* collides with the new row at the same LSN (docs/design/FINDINGS.md, F1; *)
(* the variant VClockReplication_NoFence shows it).                        *)
(*                                                                         *)
(* ShipDurableOnly is the simpler cure the code uses: a relay ships rows  *)
(* of its own member's origin only from the durable prefix of the WAL     *)
(* (WalSync, an fsync, makes the written rows durable under "write").  No *)
(* member then holds a row its origin can lose, and                       *)
(* VClockReplication_ShipDurable shows that neither fences nor the        *)
(* recovery fetch are needed for Agreement.  Rows of other origins ship   *)
(* as soon as they are written: a member that loses them is not their     *)
(* origin, cannot reuse their LSNs, and fetches them again.  Under        *)
(* ShipDurableOnly a recovering member may also stop waiting for a peer   *)
(* whose link failed before it answered (RecoveryGiveUp), as the code     *)
(* does: that peer holds no row of the member's origin that the member    *)
(* can have lost (OwnRowsHeldElsewhereAreDurable).                        *)
(*                                                                         *)
(* Actions: LocalWrite, WalFlush, WalSync, RelaySend, ApplierReceive,     *)
(* RecoveryAnswer, RecoveryGiveUp, RecoveryFinish, FenceRaise, Crash,      *)
(* OsCrash, Restart; NetworkDrop, NetworkDuplicate and Heal are the       *)
(* environment.  The code that implements each (Engine, Writer, the Relay *)
(* and Applier cores of replicaset/core/replication.py, the replica-set    *)
(* core) is listed in docs/design/vclock-replication.md.                   *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
    Members,     \* instance ids, e.g. {1, 2, 3}; the order breaks LWW ties
    Keys,        \* primary keys of the one replicated table
    Values,      \* column values
    WalMode,     \* "write" or "fsync"
    Writers,     \* the members clients write to (Members, or fewer for small runs)
    Crashable,   \* the members that may crash (Members, or fewer for small runs)
    ApplyQueued, \* TRUE: received rows queue in the batch like local ones;
                 \* FALSE: each is written and committed at once (Writer.apply)
    ShipDurableOnly, \* TRUE: relays ship their member's own rows once durable
    MaxWrites,   \* bound on client writes (all members together)
    MaxCrashes   \* bound on crashes of either kind

ASSUME WalMode \in {"write", "fsync"}
ASSUME Members \subseteq Nat /\ 0 \notin Members
ASSUME Writers \subseteq Members /\ Crashable \subseteq Members /\ ApplyQueued \in BOOLEAN
ASSUME ShipDurableOnly \in BOOLEAN
ASSUME MaxWrites \in Nat /\ MaxCrashes \in Nat

DELETE == "DELETE"    \* the value a delete writes: a tombstone
NoVersion == [val |-> "none", hlc |-> 0, origin |-> 0]

(* A client transaction's changes: an upsert, a delete, or a primary-key   *)
(* change (a delete of the old key and an insert of the new one in one     *)
(* row, docs/design/README.md §4.1).                                       *)
WriteOps ==
    {{[key |-> k, val |-> v]} : k \in Keys, v \in Values}
    \cup {{[key |-> k, val |-> DELETE]} : k \in Keys}
    \cup {{[key |-> k1, val |-> DELETE], [key |-> k2, val |-> v]} :
            <<k1, k2, v>> \in {t \in Keys \X Keys \X Values : t[1] # t[2]}}

VARIABLES
    wal,        \* wal[m]: the rows in m's WAL, in write order
    durable,    \* durable[m]: length of the prefix of wal[m] that survives an OS crash
    batch,      \* batch[m]: rows queued in the writer's open group commit
    tbl,        \* tbl[m][k]: the stored version of key k (value or tombstone)
    vclock,     \* vclock[m][o]: highest LSN of origin o written and applied on m
    pending,    \* pending[m][o]: the same, counting queued rows (apply-once check)
    hlc,        \* hlc[m]: the last stamp m's hybrid logical clock issued or received
    status,     \* "active" | "recovering" | "down"
    epoch,      \* epoch[m]: m's incarnation, bumped (and made durable) at every start
    answered,   \* answered[m]: the members that answered m's recovery fetch
    gaveUp,     \* gaveUp[m]: the members m stopped waiting for, that have not answered since
    resumed,    \* resumed[m]: [epoch, lsn] of every recovery of m that finished (durable)
    fence,      \* fence[p][o]: set of [epoch, lsn, final] records, durable
    net,        \* the network: the set of messages [to, row] in flight
    acked,      \* rows acknowledged to clients (history)
    osLost,     \* rows an OS crash cut from some WAL (history)
    writes,     \* client writes so far
    crashes,    \* crashes so far
    healed      \* TRUE once the network healed: no more drops, duplicates or crashes

vars == <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch, answered,
          gaveUp, resumed, fence, net, acked, osLost, writes, crashes, healed>>

-----------------------------------------------------------------------------
(* Helpers *)

Max(S) == IF S = {} THEN 0 ELSE CHOOSE x \in S : \A y \in S : x >= y
Range(s) == {s[i] : i \in DOMAIN s}
EmptyClock == [o \in Members |-> 0]
EmptyTable == [k \in Keys |-> NoVersion]
Up(m) == status[m] # "down"

Held(m) == wal[m] \o batch[m]                 \* every row m has applied or queued
LastLsn(log, o) == Max({log[i].lsn : i \in {j \in DOMAIN log : log[j].origin = o}})
ClockOf(log) == [o \in Members |-> LastLsn(log, o)]
MaxStamp(log) == Max({log[i].hlc : i \in DOMAIN log})

(* Version order: (hlc, origin), lexicographic. *)
AtLeast(r, v) == r.hlc > v.hlc \/ (r.hlc = v.hlc /\ r.origin >= v.origin)

(* Apply one row to a table: "upsert if (hlc, origin) >= stored version";  *)
(* a delete stores a tombstone at the row's version.                       *)
ApplyRow(t, r) ==
    [k \in Keys |->
        IF \E c \in r.ops : c.key = k
        THEN LET c == CHOOSE c \in r.ops : c.key = k
             IN IF AtLeast(r, t[k]) THEN [val |-> c.val, hlc |-> r.hlc, origin |-> r.origin]
                                    ELSE t[k]
        ELSE t[k]]

RECURSIVE Replay(_, _)
Replay(t, log) == IF log = <<>> THEN t ELSE Replay(ApplyRow(t, Head(log)), Tail(log))

(* Rows of an older incarnation of their origin beyond a fence are refused. *)
Fenced(p, r) == \E f \in fence[p][r.origin] : r.epoch < f.epoch /\ r.lsn > f.lsn

(* Where a restarted member goes: under "write" it may have lost rows of   *)
(* its own origin that peers hold, so it recovers them first.             *)
AfterRestart == IF WalMode = "write" THEN "recovering" ELSE "active"

(* When a recovering member may stop waiting for a peer that has not      *)
(* answered (RecoveryGiveUp): only when relays ship their own member's    *)
(* rows once durable.  VClockReplication_GiveUpUnguarded replaces it.     *)
GiveUpSafe == ShipDurableOnly
(* For configurations that check the recovery fetch waiting for every     *)
(* answer, as before RecoveryGiveUp existed (GiveUpSafe <- WaitForEvery):  *)
(* giving up multiplies their states by about two.                        *)
WaitForEvery == FALSE


-----------------------------------------------------------------------------
(* Actions *)

Init ==
    /\ wal = [m \in Members |-> <<>>]
    /\ durable = [m \in Members |-> 0]
    /\ batch = [m \in Members |-> <<>>]
    /\ tbl = [m \in Members |-> EmptyTable]
    /\ vclock = [m \in Members |-> EmptyClock]
    /\ pending = [m \in Members |-> EmptyClock]
    /\ hlc = [m \in Members |-> 0]
    /\ status = [m \in Members |-> "active"]
    /\ epoch = [m \in Members |-> 1]
    /\ answered = [m \in Members |-> {}]
    /\ gaveUp = [m \in Members |-> {}]
    /\ resumed = [m \in Members |-> {}]
    /\ fence = [p \in Members |-> [o \in Members |-> {}]]
    /\ net = {}
    /\ acked = {}
    /\ osLost = {}
    /\ writes = 0
    /\ crashes = 0
    /\ healed = FALSE

(* A client transaction commits on m: it takes the next LSN of m's origin *)
(* and a stamp above every stamp m has seen, and joins the open batch.    *)
(* The model checker takes the next stamp; trace validation takes the     *)
(* stamp the implementation logged (any stamp above the clock will do).   *)
LocalWriteAt(m, ops, stamp) ==
    /\ m \in Writers
    /\ status[m] = "active"
    /\ writes < MaxWrites
    /\ stamp > hlc[m]
    /\ LET r == [origin |-> m, epoch |-> epoch[m], lsn |-> pending[m][m] + 1,
                 hlc |-> stamp, ops |-> ops]
       IN /\ batch' = [batch EXCEPT ![m] = Append(@, r)]
          /\ pending' = [pending EXCEPT ![m][m] = r.lsn]
          /\ hlc' = [hlc EXCEPT ![m] = r.hlc]
    /\ writes' = writes + 1
    /\ UNCHANGED <<wal, durable, tbl, vclock, status, epoch, answered, gaveUp, resumed,
                   fence, net, acked, osLost, crashes, healed>>

LocalWrite(m, ops) == LocalWriteAt(m, ops, hlc[m] + 1)

(* Group commit: the WAL first (one write, one fsync under "fsync"), then *)
(* one SQLite commit, then the clients are answered.                      *)
WalFlush(m) ==
    /\ Up(m)
    /\ batch[m] # <<>>
    /\ wal' = [wal EXCEPT ![m] = @ \o batch[m]]
    /\ durable' = IF WalMode = "fsync" THEN [durable EXCEPT ![m] = Len(wal'[m])] ELSE durable
    /\ tbl' = [tbl EXCEPT ![m] = Replay(@, batch[m])]
    /\ vclock' = [vclock EXCEPT ![m] = pending[m]]
    /\ batch' = [batch EXCEPT ![m] = <<>>]
    /\ acked' = acked \cup {r \in Range(batch[m]) : r.origin = m /\ r.epoch = epoch[m]}
    /\ UNCHANGED <<pending, hlc, status, epoch, answered, gaveUp, resumed, fence, net,
                   osLost, writes, crashes, healed>>

(* An fsync of the WAL under "write": every written row becomes durable.   *)
WalSync(m) ==
    /\ Up(m)
    /\ durable[m] < Len(wal[m])
    /\ durable' = [durable EXCEPT ![m] = Len(wal[m])]
    /\ UNCHANGED <<wal, batch, tbl, vclock, pending, hlc, status, epoch, answered, gaveUp,
                   resumed, fence, net, acked, osLost, writes, crashes, healed>>

(* The relay s -> p ships, from s's WAL (rows that met s's wal_mode), the *)
(* next row of origin o that p's vclock lacks.  Rows of p's own origin are *)
(* not sent back to it.  A message does not name its sender: one row sent *)
(* to p by two relays is one message, delivered (NetworkDuplicate) twice. *)
RelaySend(s, p, o) ==
    /\ s # p /\ o # p
    /\ Up(s) /\ Up(p)
    /\ \E i \in DOMAIN wal[s] :
         /\ wal[s][i].origin = o
         /\ wal[s][i].lsn = pending[p][o] + 1
         /\ (ShipDurableOnly /\ o = s) => i <= durable[s]
         /\ LET msg == [to |-> p, row |-> wal[s][i]]
            IN /\ msg \notin net
               /\ net' = net \cup {msg}
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch,
                   answered, gaveUp, resumed, fence, acked, osLost, writes, crashes, healed>>

(* The applier of p takes a row off the network.  Apply-once against the *)
(* pending vclock: lsn <= pending is a copy (dropped), lsn > pending + 1  *)
(* is a gap (refused); a row of p's own origin or a fenced row is dropped. *)
Deliver(p, msg) ==
    /\ msg.to = p
    /\ Up(p)
    /\ LET r == msg.row
       IN IF r.origin # p /\ r.lsn = pending[p][r.origin] + 1 /\ ~Fenced(p, r)
          THEN /\ ApplyQueued \/ batch[p] = <<>>   \* Writer.apply flushes local rows first
               /\ pending' = [pending EXCEPT ![p][r.origin] = r.lsn]
               /\ hlc' = [hlc EXCEPT ![p] = IF r.hlc > @ THEN r.hlc ELSE @]
               /\ IF ApplyQueued
                  THEN /\ batch' = [batch EXCEPT ![p] = Append(@, r)]
                       /\ UNCHANGED <<wal, durable, tbl, vclock>>
                  ELSE /\ wal' = [wal EXCEPT ![p] = Append(@, r)]
                       /\ durable' = IF WalMode = "fsync" THEN [durable EXCEPT ![p] = Len(wal'[p])]
                                      ELSE durable
                       /\ tbl' = [tbl EXCEPT ![p] = ApplyRow(@, r)]
                       /\ vclock' = [vclock EXCEPT ![p][r.origin] = r.lsn]
                       /\ UNCHANGED batch
          ELSE UNCHANGED <<batch, pending, hlc, wal, durable, tbl, vclock>>
    /\ UNCHANGED <<status, epoch, answered, gaveUp, resumed,
                   fence, acked, osLost, writes, crashes, healed>>

ApplierReceive(p) ==
    \E msg \in net :
        /\ net' = net \ {msg}
        /\ Deliver(p, msg)

(* p answers the recovery fetch of m: every row of m's origin that p has  *)
(* applied or queued, beyond what m holds.  From now on p refuses rows of *)
(* an older incarnation of m beyond what it answered: a new fence, made   *)
(* durable with the answer.  Earlier fences stay.                         *)
RecoveryAnswer(p, m) ==
    /\ p # m
    /\ status[m] = "recovering"
    /\ p \notin answered[m]
    /\ Up(p)
    /\ LET Missing(r) == r.origin = m /\ r.lsn > pending[m][m]
           rows == SelectSeq(Held(p), Missing)
           top == pending[p][m]
       IN /\ batch' = [batch EXCEPT ![m] = @ \o rows]
          /\ pending' = [pending EXCEPT ![m][m] = IF top > @ THEN top ELSE @]
          /\ hlc' = [hlc EXCEPT ![m] = IF MaxStamp(rows) > @ THEN MaxStamp(rows) ELSE @]
          /\ fence' = [fence EXCEPT ![p][m] =
                         @ \cup {[epoch |-> epoch[m], lsn |-> top, final |-> FALSE]}]
    /\ answered' = [answered EXCEPT ![m] = @ \cup {p}]
    /\ gaveUp' = [gaveUp EXCEPT ![m] = @ \ {p}]
    /\ UNCHANGED <<wal, durable, tbl, vclock, status, epoch, resumed, net, acked,
                   osLost, writes, crashes, healed>>

(* m stops waiting for p, whose link failed before p answered (the code:  *)
(* the replica-set core's upstream_failed).  It copies no row and p raises *)
(* no fence: p is only taken off the list RecoveryFinish waits for.  This  *)
(* is safe only when relays ship their own member's rows once durable      *)
(* (GiveUpSafe, which is ShipDurableOnly): then every row of m's origin    *)
(* that p holds is in m's durable WAL prefix, which no crash of m loses    *)
(* (OwnRowsHeldElsewhereAreDurable), so p's answer would bring m nothing.  *)
(* VClockReplication_GiveUpUnguarded gives up with relays shipping rows    *)
(* once written, and breaks Agreement.                                     *)
(*                                                                         *)
(* A separate set, not p added to answered: answered[m] stays the members  *)
(* that answered and fenced m's old incarnation, and a peer given up on    *)
(* may still answer later while m waits for others (the code's link comes *)
(* back and the fetch completes): RecoveryAnswer then moves it from gaveUp *)
(* to answered.  A peer is given up on at most once per recovery, and      *)
(* RecoveryFinish empties both sets (nothing reads them once m is active;  *)
(* kept, they would only multiply the states TLC explores).               *)
RecoveryGiveUp(p, m) ==
    /\ GiveUpSafe
    /\ p # m
    /\ status[m] = "recovering"
    /\ p \notin answered[m]
    /\ p \notin gaveUp[m]
    /\ gaveUp' = [gaveUp EXCEPT ![m] = @ \cup {p}]
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch,
                   answered, resumed, fence, net, acked, osLost, writes, crashes, healed>>

(* Every other registered member answered or was given up on: m takes     *)
(* writes again, after the highest LSN of its origin any member that      *)
(* answered held, and records (durably) where it resumed; it sends that    *)
(* record, with every earlier one, to every member until they acknowledge *)
(* it.  What it knew of the fetch (answered, gaveUp) goes.                *)
RecoveryFinish(m) ==
    /\ status[m] = "recovering"
    /\ answered[m] \cup gaveUp[m] = Members \ {m}
    /\ status' = [status EXCEPT ![m] = "active"]
    /\ resumed' = [resumed EXCEPT ![m] = @ \cup {[epoch |-> epoch[m], lsn |-> pending[m][m]]}]
    /\ answered' = [answered EXCEPT ![m] = {}]
    /\ gaveUp' = [gaveUp EXCEPT ![m] = {}]
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, epoch,
                   fence, net, acked, osLost, writes, crashes, healed>>

(* p learns where a recovery of m resumed and raises that recovery's      *)
(* fence to there: rows of m's older incarnations up to it flow again,    *)
(* beyond it they stay refused for good.  A fence of a recovery that never *)
(* finished (m crashed again while recovering) goes once a later          *)
(* recovery's fence is final: that one refuses everything it refused.     *)
(* It also goes once a later recovery finished without p's answer (m gave *)
(* up on p, so p has no fence of it): kept, it would refuse for good rows *)
(* of m's older incarnation that m holds durably, and p would never catch *)
(* up (EventuallyConverge fails).  Fences are not needed where giving up  *)
(* is allowed (ShipDurableOnly), and without RecoveryGiveUp every finished *)
(* recovery has a fence at every other member: this never fires.          *)
FenceRaise(p, m) ==
    /\ Up(p)
    /\ \E f \in fence[p][m] :
         /\ ~f.final
         /\ IF \E r \in resumed[m] : r.epoch = f.epoch
            THEN LET r == CHOOSE r \in resumed[m] : r.epoch = f.epoch
                 IN fence' = [fence EXCEPT ![p][m] =
                                (@ \ {f}) \cup {[epoch |-> f.epoch, lsn |-> r.lsn, final |-> TRUE]}]
            ELSE /\ \/ \E g \in fence[p][m] : g.final /\ g.epoch > f.epoch
                    \/ \E r \in resumed[m] :
                         r.epoch > f.epoch /\ \A g \in fence[p][m] : g.epoch # r.epoch
                 /\ fence' = [fence EXCEPT ![p][m] = @ \ {f}]
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch,
                   answered, gaveUp, resumed, net, acked, osLost, writes, crashes, healed>>

(* The state a stopped member keeps nothing of (in memory only). *)
Forget(m) ==
    /\ status' = [status EXCEPT ![m] = "down"]
    /\ batch' = [batch EXCEPT ![m] = <<>>]
    /\ tbl' = [tbl EXCEPT ![m] = EmptyTable]
    /\ vclock' = [vclock EXCEPT ![m] = EmptyClock]
    /\ pending' = [pending EXCEPT ![m] = EmptyClock]
    /\ hlc' = [hlc EXCEPT ![m] = 0]
    /\ answered' = [answered EXCEPT ![m] = {}]
    /\ gaveUp' = [gaveUp EXCEPT ![m] = {}]

(* kill -9: the batch is lost, every written WAL row stays. *)
Crash(m) ==
    /\ m \in Crashable /\ Up(m) /\ ~healed /\ crashes < MaxCrashes
    /\ Forget(m)
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<wal, durable, epoch, resumed, fence, net, acked, osLost, writes, healed>>

(* Power loss under "write": the WAL keeps its durable prefix and some of *)
(* the rest (what the page cache wrote back), not all of it: an OS crash  *)
(* that loses no WAL row is a Crash.                                      *)
OsCrash(m) ==
    /\ WalMode = "write"
    /\ m \in Crashable /\ Up(m) /\ ~healed /\ crashes < MaxCrashes
    /\ \E k \in durable[m]..Len(wal[m]) - 1 :
         /\ wal' = [wal EXCEPT ![m] = SubSeq(@, 1, k)]
         /\ durable' = [durable EXCEPT ![m] = k]
         /\ osLost' = osLost \cup {wal[m][i] : i \in k + 1..Len(wal[m])}
    /\ Forget(m)
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<epoch, resumed, fence, net, acked, writes, healed>>

(* Start: rebuild the table from the WAL, seed the HLC from the highest   *)
(* stamp in it (stamps never go back), begin a new incarnation.           *)
Restart(m) ==
    /\ status[m] = "down"
    /\ status' = [status EXCEPT ![m] = AfterRestart]
    /\ epoch' = [epoch EXCEPT ![m] = @ + 1]
    /\ tbl' = [tbl EXCEPT ![m] = Replay(EmptyTable, wal[m])]
    /\ vclock' = [vclock EXCEPT ![m] = ClockOf(wal[m])]
    /\ pending' = [pending EXCEPT ![m] = ClockOf(wal[m])]
    /\ hlc' = [hlc EXCEPT ![m] = MaxStamp(wal[m])]
    /\ answered' = [answered EXCEPT ![m] = {}]
    /\ gaveUp' = [gaveUp EXCEPT ![m] = {}]
    /\ UNCHANGED <<wal, durable, batch, resumed, fence, net, acked, osLost, writes,
                   crashes, healed>>

NetworkDrop ==
    /\ ~healed
    /\ \E msg \in net : net' = net \ {msg}
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch,
                   answered, gaveUp, resumed, fence, acked, osLost, writes, crashes, healed>>

(* The network delivers a copy of msg and keeps another in flight: with  *)
(* messages as a set, this is how duplicates (any number) arise.          *)
NetworkDuplicate(p) ==
    /\ ~healed
    /\ \E msg \in net : Deliver(p, msg)
    /\ UNCHANGED net

Heal ==
    /\ ~healed
    /\ healed' = TRUE
    /\ UNCHANGED <<wal, durable, batch, tbl, vclock, pending, hlc, status, epoch,
                   answered, gaveUp, resumed, fence, net, acked, osLost, writes, crashes>>

(* The end of a run: every write made, the network healed and empty, all *)
(* members converged.  Any other state without a successor is a deadlock. *)
Terminated ==
    /\ writes = MaxWrites /\ net = {}
    /\ \A m \in Members : status[m] = "active" /\ batch[m] = <<>>
    /\ \A m1, m2 \in Members : vclock[m1] = vclock[m2]
    /\ UNCHANGED vars

(* Every step but Heal: the safety runs check all of these with faults   *)
(* allowed at any time.                                                   *)
FaultyNext ==
    \/ \E m \in Members, ops \in WriteOps : LocalWrite(m, ops)
    \/ \E m \in Members : WalFlush(m) \/ WalSync(m) \/ Crash(m) \/ OsCrash(m) \/ Restart(m)
                          \/ RecoveryFinish(m)
    \/ \E s, p, o \in Members : RelaySend(s, p, o)
    \/ \E p, m \in Members : RecoveryAnswer(p, m) \/ RecoveryGiveUp(p, m) \/ FenceRaise(p, m)
    \/ \E p \in Members : ApplierReceive(p) \/ NetworkDuplicate(p)
    \/ NetworkDrop
    \/ Terminated

Next == FaultyNext \/ Heal

Fairness ==
    /\ \A m \in Members : WF_vars(WalFlush(m)) /\ WF_vars(WalSync(m)) /\ WF_vars(Restart(m))
                          /\ WF_vars(RecoveryFinish(m))
    /\ \A s, p, o \in Members : WF_vars(RelaySend(s, p, o))
    /\ \A p, m \in Members : WF_vars(RecoveryAnswer(p, m)) /\ WF_vars(FenceRaise(p, m))
    /\ \A p \in Members : WF_vars(ApplierReceive(p))

(* Safety: faults at any time, forever. *)
Spec == Init /\ [][FaultyNext]_vars
(* Liveness: the network may heal, and from then on the replication steps *)
(* are weakly fair.                                                       *)
FairSpec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants *)

Row == [origin : Members, epoch : Nat, lsn : Nat \ {0}, hlc : Nat \ {0}, ops : WriteOps]

TypeOK ==
    /\ \A m \in Members :
         /\ Range(wal[m]) \subseteq Row /\ Range(batch[m]) \subseteq Row
         /\ durable[m] \in 0..Len(wal[m])
         /\ vclock[m] \in [Members -> Nat] /\ pending[m] \in [Members -> Nat]
         /\ status[m] \in {"active", "recovering", "down"}
    /\ \A msg \in net : msg.to \in Members /\ msg.row \in Row
    /\ writes \in 0..MaxWrites /\ crashes \in 0..MaxCrashes

(* No (origin, lsn) is applied twice on a member: its log holds each once. *)
(* (Said as "as many (origin, lsn) pairs as rows", which TLC checks in    *)
(* n log n rather than n^2: trace validation checks it on every state.)   *)
NoDoubleApply ==
    \A m \in Members :
        LET h == Held(m)
        IN Cardinality({<<h[i].origin, h[i].lsn>> : i \in DOMAIN h}) = Len(h)

(* Rows of one origin are applied in LSN order without a gap, and the    *)
(* vclocks say exactly what is held.                                      *)
PerOriginOrder ==
    \A m \in Members :
        /\ \A i \in DOMAIN Held(m) :
             Held(m)[i].lsn = 1 + Cardinality({j \in 1..i - 1 : Held(m)[j].origin = Held(m)[i].origin})
        /\ Up(m) => vclock[m] = ClockOf(wal[m]) /\ pending[m] = ClockOf(Held(m))

(* One (origin, lsn) names one row on every member that has it: no LSN is *)
(* ever reused.  (Said as "the rows held anywhere have distinct (origin,   *)
(* lsn) pairs": two different rows under one pair are two set elements    *)
(* with one projection.)                                                   *)
Agreement ==
    LET rows == UNION {Range(Held(m)) : m \in Members}
    IN Cardinality({<<r.origin, r.lsn>> : r \in rows}) = Cardinality(rows)

(* The premise of ShipDurableOnly, and why RecoveryGiveUp is safe with   *)
(* it: every row of origin o that another member holds is in o's durable  *)
(* WAL prefix, which no crash of o loses.  So a recovering member lacks no *)
(* row of its own origin that a peer holds, and a recovery answer brings  *)
(* it nothing.  Without ShipDurableOnly it need not hold and is not       *)
(* asserted.                                                              *)
OwnRowsHeldElsewhereAreDurable ==
    ShipDurableOnly =>
        \A o \in Members :
            LET kept == {wal[o][i] : i \in 1..durable[o]}
            IN \A p \in Members \ {o} :
                 \A r \in Range(Held(p)) : r.origin = o => r \in kept

(* Members holding equal vclocks hold equal tables, versions included.   *)
EqualVClocksEqualTables ==
    \A m1, m2 \in Members :
        (Up(m1) /\ Up(m2) /\ vclock[m1] = vclock[m2]) => tbl[m1] = tbl[m2]

(* The table is what replaying the WAL gives (what a restart rebuilds).   *)
TableIsWalReplay == \A m \in Members : Up(m) => tbl[m] = Replay(EmptyTable, wal[m])

(* A write acknowledged to its client is in some member's WAL, unless an  *)
(* OS crash under "write" cut it from the WAL that held it: under "fsync" *)
(* nothing acknowledged is ever lost, and under "write" no process crash  *)
(* loses it.                                                              *)
NoAckedWriteLost ==
    \A r \in acked :
        \/ \E m \in Members : r \in Range(wal[m])
        \/ WalMode = "write" /\ r \in osLost

(* The HLC never goes back: a member's clock is at or above every version *)
(* it stores, and each origin's stamps increase with its LSNs.            *)
VersionsBelowClock == \A m \in Members : Up(m) => \A k \in Keys : tbl[m][k].hlc <= hlc[m]
HlcFollowsLsn ==
    \A m \in Members :
        LET h == Held(m)
        IN \A i, j \in DOMAIN h : (h[i].origin = h[j].origin /\ h[i].lsn < h[j].lsn) => h[i].hlc < h[j].hlc

(* Keys and values are interchangeable (members are not: their ids break  *)
(* LWW ties), so safety runs may use this symmetry; liveness runs do not. *)
Symmetry == Permutations(Keys) \cup Permutations(Values)

-----------------------------------------------------------------------------
(* Liveness *)

Converged ==
    /\ \A m \in Members : status[m] = "active" /\ batch[m] = <<>>
    /\ \A m1, m2 \in Members : vclock[m1] = vclock[m2]

(* Once the network heals (no more drops, duplicates or crashes), every   *)
(* member comes back and all vclocks become and stay equal.               *)
EventuallyConverge == healed ~> []Converged

=============================================================================
