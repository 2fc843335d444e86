"""Quorum transactions (docs/design/README.md §4.5): the coordinator and participant cores of two-phase commit.

Theory of operation (`specs/QuorumCommit.tla`; methods and actions carry its names):
- A client's QUORUM or ALL transaction starts at one member, its coordinator (`begin`,
  spec Begin), with the version of each key it read. PREPARE goes to every other member;
  the coordinator prepares through its own member's Participant too, and the host reports
  that answer like any other.
- A participant (`Participant.prepare`, spec Prepare) answers CONFLICT when a live intent
  of another transaction holds a key, or when the version it stores differs from the one
  read (two quorums share a member, so a stale write cannot commit: no lost update);
  otherwise it places its intents and answers PREPARED.
- With `needed(level, total)` PREPARED votes, counted on the total registered membership
  and never on the members that seem alive, the coordinator asks the host to commit
  (`DecideCommit`, spec DecideCommit): the host takes a commit stamp above `min_stamp`
  and its clock, the next LSN of its origin, writes the row and applies it, then reports
  `committed`; the decision is that WAL row. COMMIT then carries the row to the members
  that prepared, and the row reaching any member by the apply-once path (spec
  ApplierReceive) releases that member's intents.
- The coordinator decides ABORT (spec DecideAbort) when CONFLICT answers leave too few
  members to reach the level, at the client's deadline, when a member asks and there is
  no decision yet (spec QueryDecision: checking and aborting are one step at the
  coordinator, FINDINGS F4), and, at a restart, for every transaction whose row it had
  not written (spec Restart: the votes were in memory). An abort takes no LSN, and a
  decided transaction is never aborted or decided again.
- A participant never aborts on its own. Past `timeout_s` without word from the
  coordinator it asks the coordinator and the other members (spec OnTimeout), once per
  `timeout_s`; members that learned the decision pass it on. It releases its intents when
  it learns ABORT (spec ParticipantAbort) or applies the row.
- A coordinator removed from the set answers no more (`specs/QuorumRemoval.tla`). Once a
  participant stopped following it, it asks every member of its view for the row
  (`QueryRow`); a holder sends COMMIT, a member that stopped following it too and holds
  none says NoRow, and the participant aborts when every member said NoRow.
- The client hears COMMIT once `needed(level, total)` members, the coordinator included,
  hold the row durably (`acked`), and a typed error as soon as its transaction aborts.

Time is an argument (`now_s`), never read; actions are returned, never performed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol

from replicaset.core.hlc import unpack_stamp
from replicaset.core.transitions import LocalProtocolError, transition

Key = Hashable

# The table whose rows are the registered members: a quorum transaction writing it is a
# membership change, whose voters obey the barrier and report what they hold (below).
CLUSTER_TABLE = "_cluster"
# The key a participant names when it refuses a PREPARE for the membership: the
# transaction's member set is not its own view, it still holds transactions of an older
# view (a membership change), or it has not caught up since it joined. No row has it.
MEMBERSHIP_KEY = (CLUSTER_TABLE, f"{CLUSTER_TABLE}:view")


def is_membership_change(reads: Iterable[Key]) -> bool:
    """A transaction writing `_cluster` rows (keys are `(table, key)` on the server)."""
    return any(isinstance(key, tuple) and key[0] == CLUSTER_TABLE for key in reads)


class RemoteProtocolError(Exception):
    """A peer said something that contradicts what this member knows: its message is
    dropped and its link closed, the core is left as it was."""


class Level(Enum):
    ONE = "one"
    QUORUM = "quorum"
    ALL = "all"


def needed(level: Level, total: int) -> int:
    """Members that must answer for `level`, of `total` registered members: counting only
    the members that seem alive would let each side of a partition commit (the spec's
    QuorumCommit_LiveQuorum variant loses updates)."""
    if level is Level.QUORUM:
        return total // 2 + 1
    if level is Level.ALL:
        return total
    return 1


def decides_alone(level: Level, members: frozenset[int], own: int, *, in_flight: bool) -> bool:
    """Whether this member decides a QUORUM or ALL transaction by itself, as its own row
    made durable before the answer: the registered members are this member alone, so its
    own vote is the level's count, and no transaction is in flight here, so no intent could
    refuse the write and no member could ask about it. Two-phase commit would decide the
    same; its metastore records exist for questions no one is left to ask."""
    return level is not Level.ONE and members == {own} and not in_flight


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Version:
    """A row's version: `a > b` is the spec's Newer(a, b), `a >= b` its AtLeast (the hlc
    first, the origin breaking ties)."""

    hlc: int
    origin: int


NO_VERSION = Version(hlc=0, origin=0)


class Decision(Enum):
    COMMIT = "commit"
    ABORT = "abort"


# ---------------------------------------------------------------- client errors


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    """A member refused the key: `holder` is the transaction whose live intent holds it,
    None when the member stores a newer version than the one read, and `holder_member` the
    member coordinating it, when the refusing member knows (a DDL lock names its holder
    by it). Retrying (after a new read) can succeed."""

    key: Key
    holder: int | None
    holder_member: int | None = None


class Silence(Enum):
    """Why a member did not vote PREPARED, as far as its coordinator knows: a client's
    error names every such member (a message naming one of two stopped members sent the
    operator after the wrong one)."""

    NO_ANSWER = "no answer"  # nothing yet, or the PREPARE found no link or no usable answer
    DEAD = "dead"  # SWIM holds it DEAD
    REFUSED = "refused"  # it answered CONFLICT


Unconfirmed = tuple[tuple[int, Silence], ...]
"""`(member, why)` for every member that did not vote PREPARED, in id order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumNotReached:
    """A member asked for the decision before `needed` of `total` members had answered
    PREPARED (`answered` had), or so many members were DEAD (SWIM) that `needed` could no
    longer answer: the coordinator aborted rather than leave the client waiting."""

    answered: int
    needed: int
    total: int
    dead: frozenset[int] = frozenset()
    unconfirmed: Unconfirmed = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeout:
    """The client's deadline passed before a decision, with `answered` of `total` members
    PREPARED and `needed` wanted. After a decision the outcome is known, and a deadline
    changes nothing."""

    answered: int
    needed: int
    total: int
    unconfirmed: Unconfirmed = ()


TxnError = Conflict | QuorumNotReached | Timeout


# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPrepare:
    """`members`: the total membership, so that a participant knows whom to ask later."""

    txn_id: int
    to: frozenset[int]
    reads: Mapping[Key, Version]
    members: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideCommit:
    """Commit with a stamp above `min_stamp` (the newest version read) and the host's
    clock, at the next LSN; write the row, apply it, then report `committed`."""

    txn_id: int
    min_stamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SendCommit:
    """COMMIT carrying the exact WAL row `(origin, lsn)`."""

    txn_id: int
    to: frozenset[int]
    origin: int
    lsn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DecideAbort:
    """Record the abort durably (no LSN); `reason` is for the log."""

    txn_id: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAbort:
    txn_id: int
    to: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseIntents:
    """This member's own intents go: the host calls its Participant's `abort`."""

    txn_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SendDecision:
    txn_id: int
    to: int
    decision: Decision


@dataclass(frozen=True, slots=True, kw_only=True)
class AckClient:
    txn_id: int
    origin: int
    lsn: int
    barrier: Mapping[int, int] | None = None  # a membership change's, for its joiner


@dataclass(frozen=True, slots=True, kw_only=True)
class FailClient:
    txn_id: int
    error: TxnError


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """PREPARED, for the coordinator. A vote for a membership change carries `held`, the
    voter's durable vclock: the joiner catches up to what its voters held before it votes
    (`Transaction.barrier`)."""

    txn_id: int
    held: Mapping[int, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflicted:
    """CONFLICT, for the coordinator: see `Conflict` for `holder` and `holder_member`."""

    txn_id: int
    key: Key
    holder: int | None
    holder_member: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryDecision:
    txn_id: int
    ask: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryRow:
    """Ask `ask` whether they hold the row of `txn_id`, whose `coordinator` was removed
    from the set (`specs/QuorumRemoval.tla`): a holder sends COMMIT, a member that stopped
    following the coordinator and holds no row says so (`NoRow`)."""

    txn_id: int
    coordinator: int
    ask: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class NoRow:
    """The answer to a QueryRow (spec AnswerNoRow): this member stopped following the
    removed coordinator and holds no row of `txn_id`; none will reach it from now on but
    through a member that holds it."""

    txn_id: int
    to: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveRemoved:
    """Every member of the view said NoRow (spec ResolveRemoved): the participant aborted
    the removed coordinator's transaction and released its intents; the host records the
    ABORT."""

    txn_id: int
    coordinator: int


Action = (SendPrepare | DecideCommit | SendCommit | DecideAbort | SendAbort | ReleaseIntents | SendDecision
          | AckClient | FailClient | QueryDecision | QueryRow | NoRow | ResolveRemoved)


# ---------------------------------------------------------------- coordinator


class RowHere(Enum):
    """What this member's store holds of a transaction's row: how a question about a
    transaction the coordinator no longer remembers is answered."""

    NONE = "none"
    WRITTEN = "written"  # in the WAL, not yet beyond an OS crash
    DURABLE = "durable"


class TxnState(Enum):
    PREPARING = "preparing"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ACKED = "acked"
    ABORTED = "aborted"


T = TxnState
_DECIDED = (T.COMMITTED, T.ACKED, T.ABORTED)
# state -> event -> the states the event may leave a transaction in (h11's table). Answers
# from members come in any order, so every state takes them; a decided transaction takes
# them and changes nothing. COMMITTING is the wait for the host's WAL row: the decision
# exists once the row does, so only a restart that finds no row may abort it. `committed`
# of an aborted transaction is the host's mistake: an abort never gets an LSN.
TXN_TRANSITIONS: dict[TxnState, dict[str, frozenset[TxnState]]] = {
    T.PREPARING: {"prepared": frozenset({T.PREPARING, T.COMMITTING}), "conflict": frozenset({T.PREPARING, T.ABORTED}),
                  "tick": frozenset({T.PREPARING, T.ABORTED}), "query_decision": frozenset({T.ABORTED}),
                  "restart": frozenset({T.ABORTED}), "undelivered": frozenset({T.PREPARING}),
                  "member_dead": frozenset({T.PREPARING, T.ABORTED})},
    T.COMMITTING: {"prepared": frozenset({T.COMMITTING}), "conflict": frozenset({T.COMMITTING}),
                   "query_decision": frozenset({T.COMMITTING}), "committed": frozenset({T.COMMITTED}),
                   "write_failed": frozenset({T.ABORTED}), "undelivered": frozenset({T.COMMITTING}),
                   "restart": frozenset({T.COMMITTED, T.ABORTED})},
    T.COMMITTED: {"prepared": frozenset({T.COMMITTED}), "conflict": frozenset({T.COMMITTED}),
                  "query_decision": frozenset({T.COMMITTED}), "durable": frozenset({T.COMMITTED}),
                  "acked": frozenset({T.COMMITTED, T.ACKED}), "undelivered": frozenset({T.COMMITTED})},
    T.ACKED: {"prepared": frozenset({T.ACKED}), "conflict": frozenset({T.ACKED}),
              "query_decision": frozenset({T.ACKED}), "undelivered": frozenset({T.ACKED})},
    T.ABORTED: {"prepared": frozenset({T.ABORTED}), "conflict": frozenset({T.ABORTED}),
                "query_decision": frozenset({T.ABORTED}), "undelivered": frozenset({T.ABORTED})},
}


@dataclass
class Transaction:
    """One transaction at its coordinator. `votes` and `conflicts` live in memory only;
    `decided_with` keeps the votes a COMMIT was decided with (the spec's history
    variable, for the invariants)."""

    txn_id: int
    coordinator: int
    members: frozenset[int]
    level: Level
    deadline_s: float
    min_stamp: int
    reads: Mapping[Key, Version] = field(default_factory=dict)  # what PREPARE carries
    state: TxnState = TxnState.PREPARING
    votes: set[int] = field(default_factory=set)
    barrier: dict[int, int] = field(default_factory=dict)  # what the voters of a membership change held
    conflicts: dict[int, Conflict] = field(default_factory=dict)
    decided_with: frozenset[int] = frozenset()
    origin: int | None = None
    lsn: int | None = None
    recovered: bool = False  # rebuilt from its record after a restart: the votes are gone
    row_durable: bool = False  # the row is in our WAL beyond an OS crash: others may hold it
    resend_to: set[int] = field(default_factory=set)  # members our PREPARE did not reach: sent again at the tick
    dead: set[int] = field(default_factory=set)  # members SWIM holds DEAD, not waited for

    def __str__(self) -> str:
        return f"transaction {self.txn_id:#x}"

    @property
    def needed(self) -> int:
        return needed(self.level, len(self.members))

    @property
    def decision(self) -> Decision | None:
        if self.state in (T.COMMITTED, T.ACKED):
            return Decision.COMMIT
        if self.state is T.ABORTED:
            return Decision.ABORT
        return None

    @transition(TXN_TRANSITIONS)
    def prepared(self, member: int, held: Mapping[int, int] | None = None) -> list[Action]:
        if self.state is not T.PREPARING:
            return []
        self.conflicts.pop(member, None)
        self.resend_to.discard(member)
        self.dead.discard(member)
        self.votes.add(member)
        for origin, lsn in (held or {}).items():
            self.barrier[origin] = max(self.barrier.get(origin, 0), lsn)
        if len(self.votes) < self.needed:
            return []
        self.state, self.decided_with = T.COMMITTING, frozenset(self.votes)
        self.resend_to.clear()
        return [DecideCommit(txn_id=self.txn_id, min_stamp=self.min_stamp)]

    @transition(TXN_TRANSITIONS)
    def conflict(self, member: int, key: Key, holder: int | None, holder_member: int | None = None) -> list[Action]:
        """A member that voted PREPARED holds its intent whatever it says later."""
        if self.state is not T.PREPARING or member in self.votes:
            return []
        self.conflicts[member] = Conflict(key=key, holder=holder, holder_member=holder_member)
        self.resend_to.discard(member)
        unanswered = len(self.members) - len(self.votes) - len(self.conflicts)
        if len(self.votes) + unanswered >= self.needed:
            return []
        first = next(iter(self.conflicts.values()))
        return self._abort(f"CONFLICT on {first.key!r}", first)

    @transition(TXN_TRANSITIONS)
    def undelivered(self, member: int) -> list[Action]:
        """Our PREPARE did not reach `member` (a refused connection: a joiner not
        listening yet, a member restarting; or no usable answer): it goes again at the next
        tick, so a member back before the deadline can still vote. Only while undecided: a
        PREPARE after the ABORT would be prepared by a member that had both queued."""
        if self.state is T.PREPARING and member not in self.votes and member not in self.conflicts:
            self.resend_to.add(member)
        return []

    @transition(TXN_TRANSITIONS)
    def member_dead(self, member: int) -> list[Action]:
        """SWIM holds `member` DEAD: it is not waited for. Once the members still able to
        vote cannot make the level, the transaction is aborted at once rather than at the
        deadline (ALL with one member down, QUORUM with a majority down). A dead member that
        answers after all still votes."""
        if self.state is not T.PREPARING or member in self.votes or member in self.conflicts:
            return []
        self.dead.add(member)
        self.resend_to.discard(member)
        able = len(self.members) - len(self.conflicts) - len(self.dead)
        if able >= self.needed:
            return []
        return self._abort(f"members {sorted(self.dead)} are dead",
                           QuorumNotReached(answered=len(self.votes), needed=self.needed, total=len(self.members),
                                            dead=frozenset(self.dead), unconfirmed=self.unconfirmed()))

    @transition(TXN_TRANSITIONS)
    def tick(self, now_s: float) -> list[Action]:
        if now_s < self.deadline_s:
            if not self.resend_to:
                return []
            to, self.resend_to = frozenset(self.resend_to), set()
            return [SendPrepare(txn_id=self.txn_id, to=to, reads=self.reads, members=self.members)]
        return self._abort("the client's deadline passed",
                           Timeout(answered=len(self.votes), needed=self.needed, total=len(self.members),
                                   unconfirmed=self.unconfirmed()))

    @transition(TXN_TRANSITIONS)
    def query_decision(self, asker: int) -> list[Action]:
        """While the host writes the row, and until an OS crash can no longer take it, the
        answer waits: the row, from COMMIT or a relay, or the next question, brings it. A
        COMMIT answered for a row our WAL may still lose would outlive the row: the restart
        finds no row and aborts."""
        if self.state is T.COMMITTING or (self.state is T.COMMITTED and not self.row_durable):
            return []
        actions: list[Action] = []
        if self.state is T.PREPARING:
            error = QuorumNotReached(answered=len(self.votes), needed=self.needed, total=len(self.members),
                                     unconfirmed=self.unconfirmed())
            actions = self._abort(f"member {asker} asked before a decision", error)
        decision = self.decision
        assert decision is not None
        return actions + [SendDecision(txn_id=self.txn_id, to=asker, decision=decision)]

    @transition(TXN_TRANSITIONS)
    def committed(self, origin: int, lsn: int) -> list[Action]:
        self.state, self.origin, self.lsn = T.COMMITTED, origin, lsn
        return []

    @transition(TXN_TRANSITIONS)
    def durable(self) -> list[Action]:
        """The row is in our WAL beyond an OS crash: only now may a peer hold it (FINDINGS
        F1, as relays ship our rows), so only now does COMMIT carry it."""
        if self.row_durable:
            return []
        self.row_durable = True
        to = self.decided_with - {self.coordinator}
        assert self.origin is not None and self.lsn is not None
        return [SendCommit(txn_id=self.txn_id, to=to, origin=self.origin, lsn=self.lsn)] if to else []

    @transition(TXN_TRANSITIONS)
    def write_failed(self) -> list[Action]:
        """The host could not write the row: no row, so no decision yet, and nobody holds
        one (the row is the decision): aborting is the spec's Restart without the crash.
        The host tells its client why."""
        return self._abort("its row could not be written", None)

    @transition(TXN_TRANSITIONS)
    def acked(self, holders: frozenset[int]) -> list[Action]:
        """Peers may hold a row that a restart found before our own sync says it is durable
        here: the acknowledgement waits for that sync too."""
        if not self.row_durable or len(holders & self.members) < self.needed:
            return []
        assert self.origin is not None and self.lsn is not None
        self.state = T.ACKED
        return [AckClient(txn_id=self.txn_id, origin=self.origin, lsn=self.lsn, barrier=self.barrier or None)]

    @transition(TXN_TRANSITIONS)
    def restart(self, row: tuple[int, int] | None) -> list[Action]:
        """The votes are gone. A transaction whose row the host wrote is committed (relays
        carry the row); any other was never decided, and no client waits for it now."""
        self.votes.clear()
        self.conflicts.clear()
        if self.state is T.COMMITTING and row is not None:
            self.state, (self.origin, self.lsn) = T.COMMITTED, row
            return []
        return self._abort("the coordinator restarted", None)

    def unconfirmed(self) -> Unconfirmed:
        """Every member that has not voted PREPARED, and why as far as this coordinator
        knows."""

        def why(member: int) -> Silence:
            if member in self.conflicts:
                return Silence.REFUSED
            return Silence.DEAD if member in self.dead else Silence.NO_ANSWER

        return tuple((member, why(member)) for member in sorted(self.members - self.votes))

    def _abort(self, reason: str, error: TxnError | None) -> list[Action]:
        self.state = T.ABORTED
        self.resend_to.clear()
        actions: list[Action] = [DecideAbort(txn_id=self.txn_id, reason=reason)]
        may_hold = self.members - {self.coordinator} - set(self.conflicts)
        if may_hold:
            actions.append(SendAbort(txn_id=self.txn_id, to=may_hold))
        actions.append(ReleaseIntents(txn_id=self.txn_id))
        if error is not None:
            actions.append(FailClient(txn_id=self.txn_id, error=error))
        return actions

    def check_invariants(self) -> None:
        assert self.state in TXN_TRANSITIONS
        assert self.coordinator in self.members
        assert self.votes <= self.members and set(self.conflicts) <= self.members
        assert not self.votes & set(self.conflicts), "a member either prepared or conflicted"
        assert not self.resend_to or self.state is T.PREPARING, "PREPARE goes again only while undecided"
        assert not self.resend_to & (self.votes | set(self.conflicts) | {self.coordinator})
        if self.state in (T.COMMITTING, T.COMMITTED, T.ACKED) and not self.recovered:
            assert len(self.decided_with) >= self.needed, "QuorumOnTotal"
            assert self.decided_with <= self.members
        assert (self.lsn is not None) == (self.state in (T.COMMITTED, T.ACKED)), "AbortsTakeNoLsn"
        if self.state is T.ACKED:
            assert self.row_durable, "a client is acknowledged only once the coordinator's row is durable"


@dataclass
class Coordinator:
    """The transactions one member coordinates, and what each member acknowledged as
    durable (its vclock), which is how the client's wait for the level ends, and when a
    decided record may be collected. `txns` keeps every decision until it is collected
    (`forget`; a later question is then answered by the row); `_open` the ones not ACKED
    or ABORTED, which are all that ticks and acknowledgements walk."""

    member: int
    txns: dict[int, Transaction] = field(default_factory=dict)
    durable: dict[int, dict[int, int]] = field(default_factory=dict)
    _open: dict[int, Transaction] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        return f"coordinator {self.member}"

    def begin(self, now_s: float, txn_id: int, keys_read: Mapping[Key, Version], members: frozenset[int],
              level: Level, deadline_s: float) -> list[Action]:
        """Spec Begin; `members` is the total registered membership, this member included."""
        if txn_id in self.txns:
            raise LocalProtocolError(f"{self}: transaction {txn_id:#x} began already")
        if self.member not in members:
            raise LocalProtocolError(f"{self}: member {self.member} is not in {sorted(members)}")
        min_stamp = max((version.hlc for version in keys_read.values()), default=0)
        self.txns[txn_id] = self._open[txn_id] = Transaction(
            txn_id=txn_id, coordinator=self.member, members=members, level=level, deadline_s=deadline_s,
            min_stamp=min_stamp, reads=dict(keys_read))
        others = members - {self.member}
        if not others:
            return []
        return [SendPrepare(txn_id=txn_id, to=others, reads=dict(keys_read), members=members)]

    def prepared(self, now_s: float, txn_id: int, member: int, held: Mapping[int, int] | None = None) -> list[Action]:
        txn = self._answered(txn_id, member)
        return txn.prepared(member, held) if txn else []

    def conflict(self, now_s: float, txn_id: int, member: int, key: Key, holder: int | None,
                 holder_member: int | None = None) -> list[Action]:
        txn = self._answered(txn_id, member)
        return txn.conflict(member, key, holder, holder_member) if txn else []

    def undelivered(self, now_s: float, txn_id: int, member: int) -> list[Action]:
        txn = self._answered(txn_id, member)
        return txn.undelivered(member) if txn else []

    def send_prepare(self, now_s: float, prepare: SendPrepare, dead: frozenset[int]) -> list[Action]:
        """A PREPARE this coordinator sends (at Begin, or again at a tick), given the members
        SWIM holds DEAD now: it goes to the others only, and the transaction hears of each
        dead one instead (`member_dead`), so it aborts at once when the level is out of
        reach rather than at the client's deadline. The host asks this after it carried the
        coordinator's own answer, so the own intents are placed before any abort."""
        skipped = prepare.to & dead
        if not skipped:
            return [prepare]
        live = prepare.to - skipped
        actions: list[Action] = [replace(prepare, to=live)] if live else []
        for member in sorted(skipped):
            actions += self.member_dead(now_s, member, prepare.txn_id)
        return actions

    def member_dead(self, now_s: float, member: int, txn_id: int | None = None) -> list[Action]:
        """SWIM holds `member` DEAD: no undecided transaction (or only `txn_id`) waits for it."""
        txns = self._in(T.PREPARING) if txn_id is None else [t for t in self._in(T.PREPARING) if t.txn_id == txn_id]
        return [action for txn in txns if member in txn.members for action in txn.member_dead(member)]

    def _answered(self, txn_id: int, member: int) -> Transaction | None:
        """The transaction an answer is about; an answer about one this member never
        began (it asked an unknown transaction, which is aborted) changes nothing."""
        txn = self.txns.get(txn_id)
        if txn is not None and member not in txn.members:
            raise RemoteProtocolError(f"{self}: member {member} answered for {txn}, sent to {sorted(txn.members)}")
        return txn

    def tick(self, now_s: float) -> list[Action]:
        return [action for txn in self._in(T.PREPARING) for action in txn.tick(now_s)]

    def query_decision(self, now_s: float, txn_id: int, asker: int, row: RowHere = RowHere.NONE) -> list[Action]:
        """Spec QueryDecision: answer, deciding ABORT if there is no decision. A transaction
        this member does not remember (never begun, its record lost in a crash before its
        row, or collected) is answered by its row: COMMIT once the row is durable here,
        nothing while an OS crash could still take it, ABORT without one. It needs no
        decision: one never begun, or lost with its captured rows, can never commit."""
        txn = self.txns.get(txn_id)
        if txn is not None:
            return txn.query_decision(asker)
        if row is RowHere.WRITTEN:
            return []
        return [SendDecision(txn_id=txn_id, to=asker, decision=Decision.COMMIT if row is RowHere.DURABLE
                             else Decision.ABORT)]

    def committed(self, now_s: float, txn_id: int, origin: int, lsn: int) -> list[Action]:
        """The host wrote and applied the row of a DecideCommit at `(origin, lsn)`."""
        txn = self.txns.get(txn_id)
        if txn is None:
            raise LocalProtocolError(f"{self}: committed an unknown transaction {txn_id:#x}")
        return txn.committed(origin, lsn) + self._ship_if_durable(txn) + self._ack_if_held(txn)

    def write_failed(self, now_s: float, txn_id: int) -> list[Action]:
        return self.txns[txn_id].write_failed()

    def acked(self, now_s: float, member: int, vclock: Mapping[int, int]) -> list[Action]:
        """`member` (this one too, once its own write is durable) holds `vclock` durably."""
        held = self.durable.setdefault(member, {})
        for origin, lsn in vclock.items():
            held[origin] = max(held.get(origin, 0), lsn)
        committed = self._in(T.COMMITTED)
        shipped = [action for txn in committed for action in self._ship_if_durable(txn)] if member == self.member else []
        return shipped + [action for txn in committed for action in self._ack_if_held(txn)]

    def _ship_if_durable(self, txn: Transaction) -> list[Action]:
        assert txn.origin is not None and txn.lsn is not None
        if self.durable.get(self.member, {}).get(txn.origin, 0) < txn.lsn:
            return []
        return txn.durable()

    def _ack_if_held(self, txn: Transaction) -> list[Action]:
        assert txn.origin is not None and txn.lsn is not None
        holders = frozenset(m for m, held in self.durable.items() if held.get(txn.origin, 0) >= txn.lsn)
        return txn.acked(holders)

    def not_holding(self, txn_id: int) -> tuple[int, ...]:
        """The members of committed `txn_id` not known to hold its row durably: whom a
        client told "committed, but fewer than N members confirmed it" hears named."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.origin is None or txn.lsn is None:
            return ()
        return tuple(sorted(m for m in txn.members if self.durable.get(m, {}).get(txn.origin, 0) < txn.lsn))

    def restart(self, rows_written: Mapping[int, tuple[int, int]]) -> list[Action]:
        """Spec Crash + Restart, on what survives a crash: the transactions begun and their
        decisions. `rows_written` maps each of this member's QUORUM transactions whose row
        the host found in its WAL to that row's `(origin, lsn)`."""
        self.durable.clear()
        return [action for txn in self._in(T.PREPARING, T.COMMITTING) for action in txn.restart(rows_written.get(txn.txn_id))]

    def recover(self, now_s: float, txn_id: int, members: frozenset[int], level: Level,
                row: tuple[int, int] | None, aborted: bool,
                committed_at: tuple[int, int] | None = None) -> list[Action]:
        """A transaction this member began before it restarted, from its durable record: the
        memory of it is gone, the decision is not. Undecided (not `aborted`), it is committed
        when its row is here and aborted otherwise (spec Restart); either way a member that
        asks later gets the decision, never a fresh ABORT. A record decided COMMITTED names
        its row (`committed_at`), which stands when the store lost it (a torn WAL tail took
        it after it was durable): a decided transaction is never aborted, and the row comes
        back from the peers that hold it."""
        row = row or committed_at
        if txn_id in self.txns:
            raise LocalProtocolError(f"{self}: transaction {txn_id:#x} is known already")
        txn = Transaction(txn_id=txn_id, coordinator=self.member, members=members, level=level, deadline_s=now_s,
                          min_stamp=0, state=T.ABORTED if aborted else T.COMMITTING, recovered=True)
        self.txns[txn_id] = txn
        if aborted:
            return []
        self._open[txn_id] = txn
        return txn.restart(row)

    def forget(self, txn_ids: Iterable[int]) -> None:
        """Collected (`collectable`): decided transactions leave memory with their records;
        a later question is answered by the row."""
        for txn_id in txn_ids:
            txn = self.txns.get(txn_id)
            if txn is not None and txn.decision is not None:
                del self.txns[txn_id]
                self._open.pop(txn_id, None)

    def undecided(self) -> list[Transaction]:
        """The transactions with no decision yet, or decided COMMIT but not yet written."""
        return self._in(T.PREPARING, T.COMMITTING)

    def _in(self, *states: TxnState) -> list[Transaction]:
        """The open transactions in `states`; those finished since leave `_open` here."""
        for txn_id in [i for i, txn in self._open.items() if txn.state in (T.ACKED, T.ABORTED)]:
            del self._open[txn_id]
        return [txn for txn in self._open.values() if txn.state in states]

    def check_invariants(self) -> None:
        for txn_id, txn in self.txns.items():
            assert txn.txn_id == txn_id and txn.coordinator == self.member
            assert txn.state in (T.ACKED, T.ABORTED) or self._open.get(txn_id) is txn, f"{txn} is open but not listed"
            txn.check_invariants()
        assert all(self.txns.get(txn_id) is txn for txn_id, txn in self._open.items()), "_open lists an unknown txn"


# ---------------------------------------------------------------- collection


@dataclass(frozen=True, slots=True)
class DecidedRecord:
    """A decided transaction's record: `row` `(origin, lsn)` for a commit, None for an abort."""

    txn_id: int
    row: tuple[int, int] | None


def collectable(records: Iterable[DecidedRecord], *, now_ms: int, members: frozenset[int],
                applied: Mapping[int, Mapping[int, int]], min_retention_ms: int,
                max_retention_ms: int) -> list[int]:
    """Marmot's phase-2 GC of transaction records: a decided transaction goes once it is
    older than the minimum retention (its id is its HLC stamp) and every member of
    `members` has applied its row (`applied`: what each acknowledged; an abort has no
    row), or once older than the maximum whatever the members say. A member that then
    asks about a collected transaction gets the answer its coordinator's row gives."""
    collected = []
    for record in records:
        age_ms = now_ms - unpack_stamp(record.txn_id)[0]
        if age_ms < min_retention_ms:
            continue
        if (age_ms >= max_retention_ms or record.row is None
                or all(applied.get(m, {}).get(record.row[0], 0) >= record.row[1] for m in members)):
            collected.append(record.txn_id)
    return collected


# ---------------------------------------------------------------- participant


class IntentTable(Protocol):
    """What a Participant needs of its intents: `Intents` in memory, or the metastore's
    `StoredIntents`, which keeps them durable across a crash."""

    @property
    def keys(self) -> Mapping[int, frozenset[Key]]: ...

    def holder(self, key: Key) -> int | None: ...

    def place(self, txn_id: int, keys: Iterable[Key]) -> None: ...

    def release(self, txn_id: int) -> frozenset[Key]: ...

    def check_invariants(self) -> None: ...


@dataclass
class Intents:
    """Which transaction's intent holds each key on this member, and the keys of each
    transaction (the metastore's `/intent/` and `/intent_txn/` prefixes). A store that
    deletes intents lazily answers `holder` with None for an intent whose transaction is
    finished or marked for cleanup: the overwrite rule of Marmot lives behind `holder`."""

    holders: dict[Key, int] = field(default_factory=dict)
    keys: dict[int, frozenset[Key]] = field(default_factory=dict)

    def holder(self, key: Key) -> int | None:
        return self.holders.get(key)

    def place(self, txn_id: int, keys: Iterable[Key]) -> None:
        placed = frozenset(keys)
        for key in placed:
            assert self.holders.get(key, txn_id) == txn_id, f"{key!r} is held by {self.holders[key]:#x}"
            self.holders[key] = txn_id
        self.keys[txn_id] = self.keys.get(txn_id, frozenset()) | placed

    def release(self, txn_id: int) -> frozenset[Key]:
        released = self.keys.pop(txn_id, frozenset())
        for key in released:
            del self.holders[key]
        return released

    def check_invariants(self) -> None:
        assert {(key, txn_id) for txn_id, keys in self.keys.items() for key in keys} == set(self.holders.items()), (
            "one intent per key, indexed by its transaction")


@dataclass
class PendingTxn:
    """A transaction prepared here and not finished. The times are memory only, and so is
    what a removed coordinator's transaction was told: `orphaned` is the view to ask once
    this member stopped following the coordinator, `no_row` who answered NoRow (a crash
    loses them, and the members are asked again)."""

    coordinator: int
    members: frozenset[int]
    heard_s: float
    asked_s: float | None = None
    orphaned: frozenset[int] | None = None
    no_row: set[int] = field(default_factory=set)


@dataclass
class Participant:
    """One member's side of every transaction that sent it PREPARE. `outcomes` is what it
    knows of each transaction's decision: learned, or seen in the row it applied (durable
    with the intents, in the metastore).

    A removed coordinator (`specs/QuorumRemoval.tla`, docs/design/quorum-removal.md) can
    no longer answer for its transactions. `following` is whom this member may still take
    rows from directly: every member of a view it was shown since it started (None until
    `restart` says which), less those it stopped following (`stop_following`). Once it
    stopped following a removed coordinator it asks every member of its view whether it
    holds the row (`QueryRow`); a member answers NoRow only once it stopped following that
    coordinator too, and the transaction aborts when every member of the view said so."""

    member: int
    timeout_s: float
    intents: IntentTable = field(default_factory=Intents)
    pending: dict[int, PendingTxn] = field(default_factory=dict)
    outcomes: dict[int, Decision] = field(default_factory=dict)
    following: set[int] | None = None

    def __str__(self) -> str:
        return f"participant {self.member}"

    def prepare(self, now_s: float, txn_id: int, coordinator: int, members: frozenset[int],
                reads: Mapping[Key, Version], stored: Mapping[Key, Version], *, view: frozenset[int],
                active: bool = True, held: Mapping[int, int] | None = None,
                row_applied: bool = False) -> Prepared | Conflicted | None:
        """Spec Prepare. A PREPARE sent again is answered as before (the first answer may
        have been lost); one that arrives after this member learned the outcome, or applied
        the transaction's row (its outcome may be collected), places nothing and gets no
        answer, since the coordinator has decided.

        Membership (`specs/MembershipQuorum.tla`): a quorum counted on one view meets a
        quorum counted on the next, not on one two changes later. So this member votes only
        for a transaction counted on its own `view` of the registered members (R1); for a
        membership change only once no transaction it prepared under an older view is
        pending (R2: the joiners of later changes then catch up to that transaction's row);
        and, `active` false, not at all until it has caught up after its own join (R3).
        Its vote for a membership change carries `held`, what it holds durably (R3)."""
        self._shown(view)
        if txn_id in self.outcomes or row_applied:
            return None
        change = is_membership_change(reads)
        vote = Prepared(txn_id=txn_id, held=dict(held or {}) if change else None)
        if txn_id in self.pending:
            self.pending[txn_id].heard_s = now_s
            return vote
        if not active or members != view:
            return Conflicted(txn_id=txn_id, key=MEMBERSHIP_KEY, holder=None)
        if change:
            older = next((other for other, txn in self.pending.items() if txn.members != view), None)
            if older is not None:
                return Conflicted(txn_id=txn_id, key=MEMBERSHIP_KEY, holder=older,
                                  holder_member=self.pending[older].coordinator)
        for key, read in reads.items():
            holder = self.intents.holder(key)
            if holder is not None:
                holding = self.pending.get(holder)
                return Conflicted(txn_id=txn_id, key=key, holder=holder,
                                  holder_member=holding.coordinator if holding is not None else None)
            if stored.get(key, NO_VERSION) != read:
                return Conflicted(txn_id=txn_id, key=key, holder=None)
        self.intents.place(txn_id, reads)
        self.pending[txn_id] = PendingTxn(coordinator=coordinator, members=members, heard_s=now_s)
        return vote

    def heartbeat(self, now_s: float, txn_id: int) -> None:
        """The coordinator of `txn_id` is alive."""
        if txn_id in self.pending:
            self.pending[txn_id].heard_s = now_s

    def tick(self, now_s: float) -> list[Action]:
        """Spec OnTimeout: ask, never abort. A transaction known committed waits for its row;
        one this member coordinates is its own Coordinator's to settle. A removed
        coordinator's transaction is asked about at once, of every member of the view that
        has not said NoRow, then once per `timeout_s`."""
        actions: list[Action] = []
        for txn_id, txn in self.pending.items():
            if txn.coordinator == self.member or (txn.orphaned is None and txn_id in self.outcomes):
                continue
            if txn.orphaned is None and now_s - txn.heard_s < self.timeout_s:
                continue
            if txn.asked_s is not None and now_s - txn.asked_s < self.timeout_s:
                continue
            txn.asked_s = now_s
            if txn.orphaned is None:
                actions.append(QueryDecision(txn_id=txn_id, ask=(txn.members | {txn.coordinator}) - {self.member}))
            elif ask := txn.orphaned - txn.no_row - {self.member}:
                actions.append(QueryRow(txn_id=txn_id, coordinator=txn.coordinator, ask=frozenset(ask)))
        return actions

    def view_changed(self, view: frozenset[int]) -> None:
        """The registered members as the host sees them now: a member that joined is one
        whose rows this member may take from now on."""
        self._shown(view)

    def stop_following(self, now_s: float, member: int, view: frozenset[int]) -> None:
        """Spec StopFollowing: `member` was removed (`view` no longer holds it) and this
        member takes no more rows from it: its relay and COMMITs are refused, and what they
        brought before is applied. Only now may it answer NoRow about `member`'s
        transactions, and ask about its own pending ones (asking at the removal alone is
        `QuorumRemoval_AnswerBeforeStopped`); the next `tick` asks."""
        if member in view:
            raise LocalProtocolError(f"{self}: member {member} stopped being followed while in {sorted(view)}")
        self._shown(view)
        assert self.following is not None
        self.following.discard(member)
        for txn in self.pending.values():
            if txn.coordinator == member and txn.orphaned is None:
                txn.orphaned, txn.asked_s = view, None

    def row_query(self, now_s: float, txn_id: int, coordinator: int, asker: int, view: frozenset[int],
                  row: RowHere) -> list[Action]:
        """`asker` wants to know whether this member holds the row of `txn_id`, whose
        `coordinator` it no longer has in its view. The row, durable here, is a COMMIT (the
        relay brings the row itself); an ABORT known is passed on; NoRow (spec AnswerNoRow)
        only once this member stopped following `coordinator` itself and holds no row,
        written or durable. A COMMIT learned without the row is no row: the removed
        coordinator may have decided it and died before its row reached anyone. Otherwise
        no answer: the asker asks again."""
        self._shown(view)
        if row is RowHere.DURABLE:
            return [SendDecision(txn_id=txn_id, to=asker, decision=Decision.COMMIT)]
        if self.outcomes.get(txn_id) is Decision.ABORT:
            return [SendDecision(txn_id=txn_id, to=asker, decision=Decision.ABORT)]
        if row is RowHere.WRITTEN or not self._stopped(coordinator):
            return []
        return [NoRow(txn_id=txn_id, to=asker)]

    def no_row(self, now_s: float, txn_id: int, member: int, view: frozenset[int]) -> list[Action]:
        """Spec ResolveRemoved: `member` holds no row of `txn_id`, and never will but through
        a member that holds it. Once every member of the view, this one included, said so,
        nobody holds the row and nobody will: the transaction aborts here. A quorum of the
        view is not enough (`QuorumRemoval_QuorumAnswers`): the one holder may be the
        member that has not answered.

        A COMMIT this member learned without the row (`decision_learned`) does not stop
        it: the spec's participants learn a commit only from the row. Its coordinator
        decided it and was removed before the row reached any remaining member, so no
        client was acknowledged (a quorum of its members, one of them remaining, would hold
        the row) and the row is gone with the removed member's data."""
        self._shown(view)
        txn = self.pending.get(txn_id)
        if txn is None or txn.orphaned is None or self.outcomes.get(txn_id) is Decision.ABORT:
            return []
        txn.no_row.add(member)
        txn.orphaned = view
        if not self._stopped(txn.coordinator) or not view - {self.member} <= txn.no_row:
            return []
        self._abort_removed(txn_id)
        return [ResolveRemoved(txn_id=txn_id, coordinator=txn.coordinator)]

    def _abort_removed(self, txn_id: int) -> None:
        """Abort a removed coordinator's transaction: a COMMIT learned for it without the
        row goes first (`no_row` says why)."""
        self.outcomes.pop(txn_id, None)
        self.abort(txn_id)

    def _stopped(self, member: int) -> bool:
        """Spec MayAnswerNoRow: this member will take no row from `member` directly any
        more (every view it was shown, the current one first, is in `following`)."""
        return self.following is not None and member not in self.following

    def _shown(self, view: frozenset[int]) -> None:
        if self.following is not None:
            self.following |= view

    def query_decision(self, now_s: float, txn_id: int, asker: int) -> list[Action]:
        """Another member asks: pass on a decision learned, never make one."""
        outcome = self.outcomes.get(txn_id)
        return [] if outcome is None else [SendDecision(txn_id=txn_id, to=asker, decision=outcome)]

    def decision_learned(self, txn_id: int, decision: Decision) -> None:
        """An answer to QueryDecision or QueryRow, from any member: ABORT releases the
        intents, COMMIT keeps them until the row is applied (another PREPARE for the key
        must not read a version the row is about to replace).

        An ABORT of a removed coordinator's transaction this member learned COMMIT for,
        without the row, is another member's ResolveRemoved: every member of its view, this
        one included, said it holds no row, so the learned COMMIT goes (as in `no_row`)."""
        txn = self.pending.get(txn_id)
        if decision is Decision.COMMIT:
            self._learn(txn_id, Decision.COMMIT)
        elif txn is not None and txn.orphaned is not None:
            self._abort_removed(txn_id)
        else:
            self.abort(txn_id)

    def abort(self, txn_id: int) -> None:
        """Spec ParticipantAbort (from SendAbort, or ReleaseIntents at the coordinator)."""
        self._learn(txn_id, Decision.ABORT)
        self._finish(txn_id)

    def row_applied(self, txn_id: int) -> None:
        """Spec ApplierReceive: the transaction's WAL row was applied here."""
        self._learn(txn_id, Decision.COMMIT)
        self._finish(txn_id)

    def forget(self, txn_ids: Iterable[int]) -> None:
        """Collected (`collectable`): the outcomes of finished transactions leave memory with
        their records. A PREPARE that arrives later anyway is placed and asked about again."""
        for txn_id in txn_ids:
            if txn_id not in self.pending:
                self.outcomes.pop(txn_id, None)

    def restart(self, now_s: float, view: frozenset[int]) -> None:
        """A crash loses the times; the intents and outcomes are durable. Every pending
        transaction gets a full `timeout_s` before this member asks about it, but one whose
        coordinator is not in `view`: a member removed before the restart is followed no
        more from the start, so its transactions are asked about at once."""
        self.following = set(view)
        for txn in self.pending.values():
            txn.heard_s, txn.asked_s, txn.no_row = now_s, None, set()
            txn.orphaned = view if txn.coordinator not in view else None

    def _learn(self, txn_id: int, decision: Decision) -> None:
        known = self.outcomes.setdefault(txn_id, decision)
        if known is not decision:
            raise RemoteProtocolError(f"{self}: transaction {txn_id:#x} is known {known.value}, told {decision.value}")

    def _finish(self, txn_id: int) -> None:
        self.intents.release(txn_id)
        self.pending.pop(txn_id, None)

    def check_invariants(self) -> None:
        self.intents.check_invariants()
        assert set(self.intents.keys) <= set(self.pending), "an intent belongs to a pending transaction"
        for txn_id, txn in self.pending.items():
            assert self.outcomes.get(txn_id) is not Decision.ABORT, "an intent's transaction is live"
            assert txn.orphaned is None or (self.following is not None and txn.coordinator not in self.following), (
                "a transaction is asked about by its row only once its coordinator is followed no more")
