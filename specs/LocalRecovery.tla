----------------------------- MODULE LocalRecovery -----------------------------
(***************************************************************************)
(* One member's durability (docs/design/README.md §4.4): the WAL first,    *)
(* group commit, checkpoints, WAL garbage collection, crashes, and the     *)
(* start that rebuilds the SQLite database from the newest checkpoint and  *)
(* the WAL.                                                                *)
(*                                                                         *)
(* Transactions join the writer's batch (Commit).  Engine.flush writes the *)
(* batch to the WAL with one write (FlushWal, one fsync under "fsync"),    *)
(* then commits SQLite once and answers the clients (FlushCommit).  SQLite *)
(* runs with synchronous=NORMAL: a process crash keeps its commits, an OS  *)
(* crash may take any number of its last commits away.  Our WAL under      *)
(* "write" survives a process crash; an OS crash keeps its durable prefix *)
(* and any part of the rest.  Checkpoints are VACUUM INTO copies of the    *)
(* committed database; a checkpoint's vclock is the one stored inside it. *)
(* WAL segments older than every checkpoint may be collected (WalGc).     *)
(*                                                                         *)
(* Open: if SQLite's vclock lies between the WAL's start and its end,      *)
(* replay the WAL rows after it; otherwise (SQLite ahead after an OS       *)
(* crash, or behind the collected start) rebuild from the newest           *)
(* checkpoint the WAL continues, or from nothing when the WAL starts at 0. *)
(* A checkpoint is made only of rows whose WAL records are durable (under  *)
(* "write" the WAL is fsynced first), so an OS crash never leaves a        *)
(* checkpoint ahead of the WAL.  The last two rules correct the first      *)
(* version of the rules of docs/design/README.md §4.4                      *)
(* (docs/design/FINDINGS.md, F2 and F3); the variants                      *)
(* LocalRecovery_CheckpointUnsynced and LocalRecovery_ReplayBelowWalStart  *)
(* show what fails without them.                                           *)
(*                                                                         *)
(* One origin only, so a vclock is one number: the LSN of the last row.    *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    WalMode,         \* "write" or "fsync"
    MaxTxns,         \* bound on client transactions
    BatchMax,        \* bound on transactions in one group commit
    MaxCrashes,      \* bound on crashes of either kind
    MaxCheckpoints   \* bound on checkpoints made

ASSUME WalMode \in {"write", "fsync"}
ASSUME MaxTxns \in Nat /\ BatchMax \in Nat \ {0} /\ MaxCrashes \in Nat
ASSUME MaxCheckpoints \in Nat

VARIABLES
    wal,         \* the WAL's rows [lsn, id], from LSN 1 (rows below walStart are collected)
    walStart,    \* the WAL starts after this LSN (its first segment's header vclock)
    walDurable,  \* length of the WAL prefix that survives an OS crash
    db,          \* the rows SQLite has committed, in order (its _rs_vclock is Len(db))
    batch,       \* the open group commit: executed in SQLite's open transaction
    phase,       \* "idle" | "walWritten" (between the WAL append and the SQLite commit)
                 \*        | "dbCommitted" (the wrong variant's order only)
    ckpts,       \* checkpoint files: [vc, rows], durable
    status,      \* "up" | "down" | "refused" (the start refused to run)
    acked,       \* transactions answered as committed (history)
    osLost,      \* rows an OS crash cut from the WAL (history)
    made,        \* transactions made so far (each gets a fresh id)
    ckptsMade,   \* checkpoints made so far
    crashes      \* crashes so far

vars == <<wal, walStart, walDurable, db, batch, phase, ckpts, status, acked, osLost,
          made, ckptsMade, crashes>>

-----------------------------------------------------------------------------
(* Rules the implementation chooses; each wrong variant replaces one.      *)

(* Engine.flush writes the WAL before it commits SQLite. *)
WalFirst == TRUE

(* The vclock of a checkpoint is the _rs_vclock table inside the file: the *)
(* committed database it copies.                                           *)
CheckpointVClock == Len(db)

(* Under "write" the WAL is fsynced before a checkpoint copies rows. *)
SyncWalBeforeCheckpoint == TRUE

(* Replay only when SQLite's vclock lies within the WAL. *)
ReplayFrom(v) == walStart <= v /\ v <= Len(wal)

-----------------------------------------------------------------------------
Range(s) == {s[i] : i \in DOMAIN s}
Min(S) == CHOOSE x \in S : \A y \in S : x <= y
Max(a, b) == IF a >= b THEN a ELSE b
IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(t, 1, Len(s)) = s
Written == IF phase = "walWritten" THEN batch ELSE <<>>

Init ==
    /\ wal = <<>> /\ walStart = 0 /\ walDurable = 0
    /\ db = <<>> /\ batch = <<>> /\ phase = "idle"
    /\ ckpts = {} /\ status = "up"
    /\ acked = {} /\ osLost = {}
    /\ made = 0 /\ ckptsMade = 0 /\ crashes = 0

(* Engine.commit: the transaction takes the next LSN and joins the batch. *)
Commit ==
    /\ status = "up" /\ phase = "idle"
    /\ made < MaxTxns /\ Len(batch) < BatchMax
    /\ batch' = Append(batch, [lsn |-> Len(db) + Len(batch) + 1, id |-> made + 1])
    /\ made' = made + 1
    /\ UNCHANGED <<wal, walStart, walDurable, db, phase, ckpts, status, acked, osLost,
                   ckptsMade, crashes>>

(* Engine.flush, first half: the batch's rows in one WAL write (and one   *)
(* fsync under "fsync").                                                  *)
FlushWal ==
    /\ status = "up" /\ batch # <<>>
    /\ phase = IF WalFirst THEN "idle" ELSE "dbCommitted"
    /\ wal' = wal \o batch
    /\ walDurable' = IF WalMode = "fsync" THEN Len(wal') ELSE walDurable
    /\ IF WalFirst
       THEN phase' = "walWritten" /\ UNCHANGED batch
       ELSE phase' = "idle" /\ batch' = <<>>
    /\ UNCHANGED <<walStart, db, ckpts, status, acked, osLost, made, ckptsMade, crashes>>

(* Engine.flush, second half: one SQLite commit, then every client of the *)
(* batch is answered.                                                     *)
FlushCommit ==
    /\ status = "up" /\ batch # <<>>
    /\ phase = IF WalFirst THEN "walWritten" ELSE "idle"
    /\ db' = db \o batch
    /\ acked' = acked \cup Range(batch)
    /\ IF WalFirst
       THEN phase' = "idle" /\ batch' = <<>>
       ELSE phase' = "dbCommitted" /\ UNCHANGED batch
    /\ UNCHANGED <<wal, walStart, walDurable, ckpts, status, osLost, made, ckptsMade,
                   crashes>>

(* Engine.checkpoint: VACUUM INTO on a reader copies the committed        *)
(* database.  A file named by the same signature replaces the older one.  *)
Checkpoint ==
    /\ status = "up" /\ ckptsMade < MaxCheckpoints
    /\ LET c == [vc |-> CheckpointVClock, rows |-> db]
       IN ckpts' = {d \in ckpts : d.vc # c.vc} \cup {c}
    /\ walDurable' = IF SyncWalBeforeCheckpoint THEN Len(wal) ELSE walDurable
    /\ ckptsMade' = ckptsMade + 1
    /\ UNCHANGED <<wal, walStart, db, batch, phase, status, acked, osLost, made, crashes>>

(* GC: WAL segments older than every checkpoint go (the checkpoints are   *)
(* the only GC consumers of a lone member).                               *)
WalGc ==
    /\ status = "up" /\ ckpts # {}
    /\ LET upto == Min({c.vc : c \in ckpts} \cup {Len(wal)})
       IN /\ upto > walStart
          /\ walStart' = upto
    /\ UNCHANGED <<wal, walDurable, db, batch, phase, ckpts, status, acked, osLost, made,
                   ckptsMade, crashes>>

(* kill -9: the open SQLite transaction rolls back; what was written to   *)
(* the WAL and committed to SQLite stays.                                 *)
Crash ==
    /\ status = "up" /\ crashes < MaxCrashes
    /\ status' = "down" /\ batch' = <<>> /\ phase' = "idle"
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<wal, walStart, walDurable, db, ckpts, acked, osLost, made, ckptsMade>>

(* Power loss: the WAL keeps its durable prefix and maybe more; SQLite   *)
(* (synchronous=NORMAL) keeps any prefix of its commits.                  *)
OsCrash ==
    /\ status = "up" /\ crashes < MaxCrashes
    /\ \E kw \in Max(walDurable, walStart)..Len(wal), kd \in 0..Len(db) :
         /\ wal' = SubSeq(wal, 1, kw)
         /\ walDurable' = kw
         /\ osLost' = osLost \cup {wal[i] : i \in kw + 1..Len(wal)}
         /\ db' = SubSeq(db, 1, kd)
    /\ status' = "down" /\ batch' = <<>> /\ phase' = "idle"
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<walStart, ckpts, acked, made, ckptsMade>>

(* Engine._open: replay the WAL after SQLite's vclock, or rebuild from the *)
(* newest checkpoint the WAL continues (Engine._rebuild).                  *)
Open ==
    /\ status = "down"
    /\ LET v == Len(db)
           usable == {c \in ckpts : walStart <= c.vc /\ c.vc <= Len(wal)}
           newest == CHOOSE c \in usable : \A d \in usable : d.vc <= c.vc
       IN IF ReplayFrom(v)
          THEN IF v >= walStart   \* read_from refuses a vclock below the WAL start
               THEN status' = "up" /\ db' = db \o SubSeq(wal, v + 1, Len(wal))
               ELSE status' = "refused" /\ UNCHANGED db
          ELSE IF usable # {}
          THEN status' = "up" /\ db' = newest.rows \o SubSeq(wal, newest.vc + 1, Len(wal))
          ELSE IF walStart = 0
          THEN status' = "up" /\ db' = wal
          ELSE status' = "refused" /\ UNCHANGED db
    /\ UNCHANGED <<wal, walStart, walDurable, batch, phase, ckpts, acked, osLost, made,
                   ckptsMade, crashes>>

(* The end of a run: nothing left to do.  Any other state without a       *)
(* successor is a deadlock.                                                *)
Terminated ==
    /\ status \in {"up", "refused"} /\ batch = <<>> /\ made = MaxTxns
    /\ UNCHANGED vars

Next == Commit \/ FlushWal \/ FlushCommit \/ Checkpoint \/ WalGc \/ Crash \/ OsCrash
        \/ Open \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants *)

Txn == [lsn : Nat \ {0}, id : 1..MaxTxns]
TypeOK ==
    /\ Range(wal) \subseteq Txn /\ Range(db) \subseteq Txn /\ Range(batch) \subseteq Txn
    /\ walStart \in Nat /\ walDurable \in 0..Len(wal)
    /\ phase \in {"idle", "walWritten", "dbCommitted"}
    /\ status \in {"up", "down", "refused"}

(* What Open would rebuild from checkpoint c, and the bases it may use. *)
Rebuilt(c) == c.rows \o SubSeq(wal, c.vc + 1, Len(wal))
Bases == {c \in ckpts : walStart <= c.vc /\ c.vc <= Len(wal)}
         \cup (IF walStart = 0 THEN {[vc |-> 0, rows |-> <<>>]} ELSE {})

(* Recovery gives back exactly the WAL: every base a start may rebuild    *)
(* from (a checkpoint the WAL continues, or nothing when the WAL starts   *)
(* at 0), plus the WAL rows after the base's vclock, equals the WAL; and  *)
(* a running member's SQLite is the WAL (less the batch being flushed).   *)
(* A checkpoint holding rows the WAL later lost, or whose vclock is not   *)
(* the one inside it, breaks the first part.                               *)
RecoveredEqualsCheckpointPlusWal ==
    /\ \A c \in Bases : Rebuilt(c) = wal
    /\ status = "up" => db \o Written = wal

(* A transaction answered as committed is never lost: it is in the WAL  *)
(* or in SQLite, unless an OS crash under "write" cut it from the WAL.    *)
(* (Under "fsync" nothing answered is ever lost; under "write" no process *)
(* crash loses it.)                                                       *)
NoAckedWriteLost ==
    \A t \in acked :
        \/ t \in Range(wal) \cup Range(db)
        \/ WalMode = "write" /\ t \in osLost

(* The start never refuses: a usable checkpoint or the whole WAL is always *)
(* there.                                                                  *)
StartAlwaysPossible == status # "refused"

=============================================================================
