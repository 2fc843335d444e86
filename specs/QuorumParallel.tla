------------------------------ MODULE QuorumParallel ------------------------------
(***************************************************************************)
(* QUORUM writes in one round trip (docs/design/quorum-parallel.md): the   *)
(* proposed successor of QuorumCommit, which still describes the running   *)
(* code.                                                                   *)
(*                                                                         *)
(* The coordinator writes its STAGING record and its own slot and sends    *)
(* PREPARE at once (Begin).  Every member's answer is a write-once slot    *)
(* for (member, txn): PREPARED, or REFUSED on a conflict (an intent of     *)
(* another transaction on the key, or a row applied there that the         *)
(* coordinator had not read) or by a fence.  A slot is first written      *)
(* (volatile, lost by a crash) and then durable; only a durable slot is   *)
(* answered.  The outcome is a function of the durable slots:              *)
(*   committed iff PREPARED slots reach floor(Total/2)+1 of ALL members,   *)
(*   aborted   iff REFUSED slots make that impossible.                     *)
(* Because durable slots are write-once, both outcomes are stable, so the *)
(* client is acked as soon as the coordinator has seen a committing set;  *)
(* the row (LSN, WAL, apply, intent release) follows off its path.        *)
(*                                                                         *)
(* Recovery (a restarted coordinator, a participant after silence, the     *)
(* coordinator at the client's deadline) is over-approximated as "any     *)
(* member with a stake in t, at any time": it fences members (a member    *)
(* without a slot writes REFUSED durably, so no late PREPARE can land)    *)
(* and decides from the durable slots it reads.                            *)
(*                                                                         *)
(* LSN choice: the ack carries NO LSN.  The LSN is told later (Token),    *)
(* and only once the row holding it is durable: a volatile row's LSN is   *)
(* reused by the next row after a crash.                                   *)
(*                                                                         *)
(* Abstractions: messages are not variables.  PREPARE stays deliverable   *)
(* forever (late, duplicated, reordered; lost = never taken); an answer    *)
(* is the durable slot itself, read whenever the reader chooses (a lost   *)
(* answer is a read never made).  Reading durable slots atomically is     *)
(* sound because they never change.  An abort releases every intent of    *)
(* its transaction at once: an aborted transaction never commits, so      *)
(* releasing later only holds keys longer.                                 *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets, TLC

CONSTANTS
    Members,      \* the total registered membership, e.g. {1, 2, 3}
    Keys,         \* keys (one per transaction)
    Txns,         \* QUORUM transactions (model values)
    Coordinators, \* members clients send QUORUM writes to
    MaxCrashes,   \* bound on crashes
    MaxFences     \* bound on fence writes

ASSUME Members \subseteq Nat /\ 0 \notin Members
ASSUME Coordinators \subseteq Members
ASSUME MaxCrashes \in Nat /\ MaxFences \in Nat

Total == Cardinality(Members)
QuorumSize == Total \div 2 + 1
NoKey == "nokey"

(* Slot values.  "pv": PREPARED written, not yet durable (it holds the    *)
(* intent, a crash loses both); "p": durable PREPARED; "r": REFUSED by a  *)
(* conflict; "f": REFUSED by a fence.  A refusal is modelled durable at   *)
(* once: a refusal lost before its fsync was never answered and holds no  *)
(* intent, so it is a PREPARE that has not landed yet.                    *)
SlotValues == {"none", "pv", "p", "r", "f"}

VARIABLES
    status,     \* status[m]: "up" | "down"
    txn,        \* txn[t]: [coord, key, read]; coord = 0 until t begins; read: rows of key seen
    slot,       \* slot[m][t] \in SlotValues
    applied,    \* applied[m]: the transactions whose row m applied
    rows,       \* rows[c]: c's WAL rows (transactions), LSN = index
    durableLen, \* durableLen[c]: how many of rows[c] are durable
    decision,   \* decision[t]: "none" | "commit" | "abort", by whoever decided (history)
    acked,      \* acked[t]: the client was told "committed" (no LSN)
    token,      \* token[t]: the LSN the client was told, 0 = none yet
    crashes,
    fences

vars == <<status, txn, slot, applied, rows, durableLen, decision, acked, token,
          crashes, fences>>

-----------------------------------------------------------------------------
Begun(t) == txn[t].coord # 0
Coord(t) == txn[t].coord
Key(t) == txn[t].key
Up(m) == status[m] = "up"
Range(s) == {s[i] : i \in DOMAIN s}
DurableRows(c) == {rows[c][i] : i \in 1..durableLen[c]}

PreparedSet(t) == {m \in Members : slot[m][t] = "p"}
RefusedSet(t) == {m \in Members : slot[m][t] \in {"r", "f"}}
ImplicitCommit(t) == Cardinality(PreparedSet(t)) >= QuorumSize
ImplicitAbort(t) == Cardinality(RefusedSet(t)) > Total - QuorumSize

(* The intent of u on m: its PREPARED slot (volatile or durable) until   *)
(* the row is applied there or u is aborted.                              *)
Holds(m, u) == slot[m][u] \in {"pv", "p"} /\ u \notin applied[m] /\ decision[u] # "abort"

(* A row on the key applied on m that the coordinator had not read.  The *)
(* intent alone is not enough: it goes when the row is applied, and a     *)
(* transaction that read the older version must still be refused          *)
(* (variant QuorumParallel_NoReadCheck).                                  *)
StaleRead(m, t) == \E u \in applied[m] : Key(u) = Key(t) /\ u \notin txn[t].read

(* Why a member refuses t: another transaction's intent on the key, or a *)
(* stale read.                                                            *)
Conflict(m, t) ==
    \/ \E u \in Txns : u # t /\ Begun(u) /\ Key(u) = Key(t) /\ Holds(m, u)
    \/ StaleRead(m, t)

Answer(m, t) == IF Conflict(m, t) THEN "r" ELSE "pv"

(* A recoverer has a stake in t: its coordinator, or a member with a slot. *)
Stake(r, t) == Begun(t) /\ Up(r) /\ (r = Coord(t) \/ slot[r][t] # "none")

-----------------------------------------------------------------------------
(* Rules the wrong variants replace. *)

(* What the coordinator counts before acking: durable PREPARED slots.     *)
AckCount(t) == Cardinality(PreparedSet(t))

(* Which row positions may be told to the client: durable ones only.     *)
TokenPositions(c) == 1..durableLen[c]

(* What a restart does: nothing but come back; recovery decides later.   *)
OnRestart(m) == UNCHANGED <<txn, slot, applied, rows, durableLen, decision, acked,
                           token, fences>>

(* Extra ways to abort (none in the rule). *)
ExtraAbort(t) == FALSE

-----------------------------------------------------------------------------
Init ==
    /\ status = [m \in Members |-> "up"]
    /\ txn = [t \in Txns |-> [coord |-> 0, key |-> NoKey, read |-> {}]]
    /\ slot = [m \in Members |-> [t \in Txns |-> "none"]]
    /\ applied = [m \in Members |-> {}]
    /\ rows = [c \in Members |-> <<>>]
    /\ durableLen = [c \in Members |-> 0]
    /\ decision = [t \in Txns |-> "none"]
    /\ acked = [t \in Txns |-> FALSE]
    /\ token = [t \in Txns |-> 0]
    /\ crashes = 0
    /\ fences = 0

(* STAGING record, own slot and PREPARE in one step.  The read is the    *)
(* set of rows on the key the coordinator applied.                        *)
Begin(t, c, k) ==
    /\ c \in Coordinators /\ ~Begun(t) /\ Up(c)
    /\ txn' = [txn EXCEPT ![t] = [coord |-> c, key |-> k,
                                  read |-> {u \in applied[c] : Key(u) = k}]]
    /\ slot' = [slot EXCEPT ![c][t] =
                   IF \E u \in Txns : u # t /\ Begun(u) /\ Key(u) = k /\ Holds(c, u)
                   THEN "r" ELSE "pv"]
    /\ UNCHANGED <<status, applied, rows, durableLen, decision, acked, token, crashes, fences>>

(* A PREPARE lands on p (any time, any number of times: write-once).     *)
Prepare(p, t) ==
    /\ Begun(t) /\ Up(p) /\ slot[p][t] = "none"
    /\ slot' = [slot EXCEPT ![p][t] = Answer(p, t)]
    /\ UNCHANGED <<status, txn, applied, rows, durableLen, decision, acked, token, crashes, fences>>

(* The slot's fsync. *)
SyncSlot(m, t) ==
    /\ Up(m) /\ slot[m][t] = "pv"
    /\ slot' = [slot EXCEPT ![m][t] = "p"]
    /\ UNCHANGED <<status, txn, applied, rows, durableLen, decision, acked, token, crashes, fences>>

(* The coordinator has PREPARED answers from a majority of the total     *)
(* membership: the outcome is implicit, the client is answered.          *)
Ack(t) ==
    /\ Begun(t) /\ Up(Coord(t)) /\ ~acked[t] /\ decision[t] # "abort"
    /\ AckCount(t) >= QuorumSize
    /\ acked' = [acked EXCEPT ![t] = TRUE]
    /\ decision' = [decision EXCEPT ![t] = "commit"]
    /\ UNCHANGED <<status, txn, slot, applied, rows, durableLen, token, crashes, fences>>

(* A recoverer fences m: a member with no slot writes REFUSED durably.   *)
(* A volatile slot is not fenced: the member answers it once durable.    *)
(* The recoverer does not know what the coordinator decided in memory    *)
(* (an ack); fencing an implicit commit changes nothing, so it is left   *)
(* out to keep the model small.                                           *)
Fence(r, m, t) ==
    /\ Stake(r, t) /\ decision[t] # "abort" /\ ~ImplicitCommit(t)
    /\ Up(m) /\ slot[m][t] = "none" /\ fences < MaxFences
    /\ slot' = [slot EXCEPT ![m][t] = "f"]
    /\ fences' = fences + 1
    /\ UNCHANGED <<status, txn, applied, rows, durableLen, decision, acked, token, crashes>>

(* A recoverer decides from the durable slots alone; otherwise it asks    *)
(* again.  It cannot see a decision made in another member's memory, so   *)
(* an abort is not guarded by decision[t] (a commit it overrides is a     *)
(* split that NoSplitDecision sees through acked, rows or the slots).    *)
RecoverDecide(r, t) ==
    /\ Stake(r, t)
    /\ \/ ImplicitCommit(t) /\ decision[t] = "none"
          /\ decision' = [decision EXCEPT ![t] = "commit"]
       \/ (ImplicitAbort(t) \/ ExtraAbort(t)) /\ decision[t] # "abort"
          /\ decision' = [decision EXCEPT ![t] = "abort"]
    /\ UNCHANGED <<status, txn, slot, applied, rows, durableLen, acked, token, crashes, fences>>

(* The explicit commit, off the client's path: the coordinator takes the  *)
(* next LSN (a committed row only) and writes the row.                    *)
WriteRow(t) ==
    /\ Begun(t) /\ Up(Coord(t)) /\ decision[t] = "commit"
    /\ t \notin Range(rows[Coord(t)])
    /\ rows' = [rows EXCEPT ![Coord(t)] = Append(@, t)]
    /\ UNCHANGED <<status, txn, slot, applied, durableLen, decision, acked, token, crashes, fences>>

SyncRows(c) ==
    /\ Up(c) /\ durableLen[c] < Len(rows[c])
    /\ durableLen' = [durableLen EXCEPT ![c] = Len(rows[c])]
    /\ UNCHANGED <<status, txn, slot, applied, rows, decision, acked, token, crashes, fences>>

(* A durable row reaches m (the coordinator included) and is applied:    *)
(* the intent goes.                                                       *)
ApplyRow(m, t) ==
    /\ Up(m) /\ Begun(t) /\ t \notin applied[m]
    /\ t \in DurableRows(Coord(t))
    /\ applied' = [applied EXCEPT ![m] = @ \cup {t}]
    /\ UNCHANGED <<status, txn, slot, rows, durableLen, decision, acked, token, crashes, fences>>

(* The client learns the LSN of its transaction's row. *)
Token(t) ==
    /\ acked[t] /\ token[t] = 0 /\ Up(Coord(t))
    /\ \E i \in TokenPositions(Coord(t)) :
          /\ rows[Coord(t)][i] = t
          /\ token' = [token EXCEPT ![t] = i]
    /\ UNCHANGED <<status, txn, slot, applied, rows, durableLen, decision, acked, crashes, fences>>

(* A crash loses volatile slots and the WAL tail past the last fsync.     *)
Crash(m) ==
    /\ Up(m) /\ crashes < MaxCrashes
    /\ status' = [status EXCEPT ![m] = "down"]
    /\ slot' = [slot EXCEPT ![m] = [t \in Txns |-> IF @[t] = "pv" THEN "none" ELSE @[t]]]
    /\ rows' = [rows EXCEPT ![m] = SubSeq(@, 1, durableLen[m])]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<txn, applied, durableLen, decision, acked, token, fences>>

Restart(m) ==
    /\ status[m] = "down"
    /\ status' = [status EXCEPT ![m] = "up"]
    /\ crashes' = crashes
    /\ OnRestart(m)

(* The end of a run: all decided, committed rows durable and applied     *)
(* everywhere, no volatile slot.                                          *)
Terminated ==
    /\ \A t \in Txns : Begun(t) /\ decision[t] # "none"
    /\ \A m \in Members : Up(m)
    /\ \A m \in Members, t \in Txns : slot[m][t] # "pv"
    /\ \A t \in Txns : decision[t] = "commit" =>
          /\ t \in DurableRows(Coord(t))
          /\ \A m \in Members : t \in applied[m]
    /\ UNCHANGED vars

Next ==
    \/ \E t \in Txns, c \in Members, k \in Keys : Begin(t, c, k)
    \/ \E t \in Txns : Ack(t) \/ WriteRow(t) \/ Token(t)
    \/ \E m \in Members, t \in Txns : Prepare(m, t) \/ SyncSlot(m, t) \/ ApplyRow(m, t)
                                      \/ RecoverDecide(m, t)
    \/ \E r, m \in Members, t \in Txns : Fence(r, m, t)
    \/ \E m \in Members : SyncRows(m) \/ Crash(m) \/ Restart(m)
    \/ Terminated

(* Fairness for liveness: what the coordinator must do once commit is     *)
(* implicit.  Recovery by the coordinator itself is enough.               *)
Fairness ==
    /\ \A m \in Members : WF_vars(Restart(m)) /\ WF_vars(SyncRows(m))
    /\ \A m \in Members, t \in Txns : WF_vars(SyncSlot(m, t)) /\ WF_vars(ApplyRow(m, t))
    /\ \A t \in Txns : WF_vars(WriteRow(t))
                       /\ WF_vars(Begun(t) /\ RecoverDecide(Coord(t), t))

Spec == Init /\ [][Next]_vars
FairSpec == Spec /\ Fairness

-----------------------------------------------------------------------------
(* Invariants *)

TypeOK ==
    /\ status \in [Members -> {"up", "down"}]
    /\ slot \in [Members -> [Txns -> SlotValues]]
    /\ decision \in [Txns -> {"none", "commit", "abort"}]
    /\ acked \in [Txns -> BOOLEAN]
    /\ \A m \in Members : applied[m] \subseteq Txns /\ durableLen[m] <= Len(rows[m])

Committed(t) ==
    \/ ImplicitCommit(t) \/ decision[t] = "commit" \/ acked[t]
    \/ \E m \in Members : t \in applied[m] \/ t \in Range(rows[m])

(* An acked transaction is never aborted, and every member that applies *)
(* it applies the coordinator's durable row.                              *)
AckedIsCommitted ==
    \A t \in Txns : acked[t] =>
        /\ decision[t] # "abort"
        /\ \A m \in Members : t \in applied[m] => t \in DurableRows(Coord(t))

(* No transaction both committed (by any sign) and aborted. *)
NoSplitDecision == \A t \in Txns : ~(Committed(t) /\ decision[t] = "abort")

(* Two committed transactions on one key are ordered: one read the       *)
(* other's row.                                                           *)
NoLostUpdate ==
    \A t1, t2 \in Txns :
        (t1 # t2 /\ Begun(t1) /\ Begun(t2) /\ Key(t1) = Key(t2)
                 /\ Committed(t1) /\ Committed(t2))
            => t1 \in txn[t2].read \/ t2 \in txn[t1].read

(* A commit, however learned, has durable PREPARED slots from a majority *)
(* of the total membership.                                               *)
QuorumOnTotal ==
    \A t \in Txns : (decision[t] = "commit" \/ acked[t]) => ImplicitCommit(t)

(* An abort without a refusing majority of actual conflicts needs fences. *)
AbortOnlyIfFenced ==
    \A t \in Txns :
        (decision[t] = "abort"
         /\ Cardinality({m \in Members : slot[m][t] = "r"}) <= Total - QuorumSize)
            => \E m \in Members : slot[m][t] = "f"

(* Only committed transactions take LSNs, once each, gap-free. *)
AbortsTakeNoLsn ==
    \A c \in Members : \A i \in DOMAIN rows[c] :
        /\ decision[rows[c][i]] = "commit"
        /\ Coord(rows[c][i]) = c
        /\ \A j \in DOMAIN rows[c] : j # i => rows[c][j] # rows[c][i]

(* The LSN told to the client is its row's, for good. *)
AckedTokenHeld ==
    \A t \in Txns : token[t] # 0 =>
        /\ token[t] <= Len(rows[Coord(t)])
        /\ rows[Coord(t)][token[t]] = t

Symmetry == Permutations(Txns)

-----------------------------------------------------------------------------
(* Liveness *)

ImplicitCommitLeadsToRow ==
    \A t \in Txns : ImplicitCommit(t) ~> (Begun(t) /\ t \in DurableRows(Coord(t)))

=============================================================================
