"""A stream transaction: BEGIN, statements and COMMIT or ROLLBACK on one iproto stream, as a
core (docs/decisions.md, "Stream transactions take the writer per statement").

The session carries out what it decides: the rows themselves stay opaque here (`captured`,
what the writer took back out of SQLite after the last statement), and so does how a COMMIT
reaches the writer or the quorum. What this core owns is when a request of the stream may
run and what it hears: a BEGIN on a stream whose transaction is still open (or aborted and
not yet rolled back) is refused; a transaction past its deadline, or one a statement found
in conflict, is aborted, its rows dropped, and every later request of the stream hears why
until COMMIT or ROLLBACK ends it; COMMIT of an aborted transaction answers that error, and
either ends the transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from replicaset.core.quorum import Level
from replicaset.core.transitions import transition


class StreamState(Enum):
    IDLE = "idle"  # no transaction: each request of the stream is its own
    OPEN = "open"  # BEGIN answered: statements gather rows until COMMIT or ROLLBACK
    ABORTED = "aborted"  # timed out or in conflict: its rows dropped, every request hears why


S = StreamState
STREAM_TRANSITIONS: dict[StreamState, dict[str, frozenset[StreamState]]] = {
    S.IDLE: {"begin": frozenset({S.OPEN}), "statement": frozenset({S.IDLE}), "finish": frozenset({S.IDLE})},
    S.OPEN: {"begin": frozenset({S.OPEN}), "statement": frozenset({S.OPEN}), "ran": frozenset({S.OPEN}),
             "conflicted": frozenset({S.ABORTED}), "expired": frozenset({S.ABORTED}), "finish": frozenset({S.IDLE})},
    S.ABORTED: {"begin": frozenset({S.ABORTED}), "statement": frozenset({S.ABORTED}), "finish": frozenset({S.IDLE})},
}


class ActiveTransaction(Exception):
    """BEGIN on a stream whose transaction has not ended (Tarantool's ER_ACTIVE_TRANSACTION)."""


class Aborted(Exception):
    """Why the stream's transaction was aborted: what each of its requests hears."""

    def __init__(self, message: str, *, timeout: bool) -> None:
        super().__init__(message)
        self.message, self.timeout = message, timeout

    def again(self) -> Aborted:
        """The same answer for the next request: raised afresh, so no traceback piles up."""
        return Aborted(self.message, timeout=self.timeout)


TIMED_OUT = "Transaction has been aborted by timeout"


@dataclass(frozen=True, slots=True)
class Commit:
    """What COMMIT carries out: the transaction's rows, at its level."""

    captured: object
    level: Level


@dataclass
class StreamTxn:
    state: StreamState = S.IDLE
    level: Level = Level.ONE
    deadline_s: float = math.inf  # the lane waits for the stream's next request until then
    captured: object | None = None  # the rows so far, outside SQLite: dropping them rolls back
    aborted: Aborted | None = None

    def __str__(self) -> str:
        return f"stream transaction ({self.state.value})"

    @property
    def began(self) -> bool:
        return self.state is not S.IDLE

    @transition(STREAM_TRANSITIONS)
    def begin(self, now_s: float, level: Level, timeout_s: float) -> None:
        if self.state is not S.IDLE:
            raise ActiveTransaction("Operation is not permitted when there is an active transaction")
        self.state, self.level, self.aborted, self.deadline_s = S.OPEN, level, None, now_s + timeout_s

    @transition(STREAM_TRANSITIONS)
    def statement(self, default: Level) -> Level:
        """A statement of the stream is to run: the level it runs at, its transaction's
        when one is open; `Aborted` while the transaction is aborted."""
        if self.aborted is not None:
            raise self.aborted.again()
        return self.level if self.state is S.OPEN else default

    @transition(STREAM_TRANSITIONS)
    def ran(self, captured: object) -> None:
        """A statement of the open transaction ran: its rows so far."""
        self.captured = captured

    @transition(STREAM_TRANSITIONS)
    def conflicted(self, message: str) -> Aborted:
        """A statement found a row or table it depends on changed since: aborted."""
        return self._abort(Aborted(message, timeout=False))

    @transition(STREAM_TRANSITIONS)
    def expired(self) -> Aborted:
        """The deadline passed before COMMIT: aborted."""
        return self._abort(Aborted(TIMED_OUT, timeout=True))

    def _abort(self, why: Aborted) -> Aborted:
        self.state, self.captured, self.aborted, self.deadline_s = S.ABORTED, None, why, math.inf
        return why

    @transition(STREAM_TRANSITIONS)
    def finish(self, *, commit: bool) -> Commit | None:
        """COMMIT or ROLLBACK: the transaction ends either way. What a COMMIT carries out,
        None when there is nothing to write; `Aborted` for a COMMIT of an aborted one."""
        captured, aborted, level = self.captured, self.aborted, self.level
        self.state, self.captured, self.aborted, self.deadline_s = S.IDLE, None, None, math.inf
        if commit and aborted is not None:
            raise aborted.again()
        return Commit(captured=captured, level=level) if commit and captured is not None else None

    def dropped(self) -> None:
        """The stream's lane ended (the connection closed): its rows go, rolling it back."""
        self.captured = None

    def check_invariants(self) -> None:
        assert (self.state is S.ABORTED) == (self.aborted is not None), self
        assert self.state is S.OPEN or self.captured is None, self
        assert self.state is S.OPEN or self.deadline_s == math.inf, self
