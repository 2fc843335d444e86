"""The stream transaction core driven bare: what each request of a stream may do and hears."""

from __future__ import annotations

import math

import pytest

from replicaset.core.quorum import Level
from replicaset.core.streams import Aborted, ActiveTransaction, Commit, StreamState, StreamTxn
from replicaset.core.transitions import LocalProtocolError

ROWS = object()  # the writer's rows, opaque to the core


def opened(level: Level = Level.QUORUM) -> StreamTxn:
    stream = StreamTxn()
    stream.begin(10.0, level, timeout_s=5.0)
    stream.check_invariants()
    return stream


def test_outside_a_transaction_each_statement_runs_at_the_default_level_and_commit_writes_nothing():
    stream = StreamTxn()
    assert stream.statement(Level.ONE) is Level.ONE and not stream.began
    assert stream.finish(commit=True) is None, "COMMIT without BEGIN answers, as Tarantool does"
    assert stream.state is StreamState.IDLE


def test_an_open_transaction_runs_its_statements_at_its_level_and_commit_hands_its_rows_over():
    stream = opened(Level.ALL)
    assert stream.deadline_s == 15.0 and stream.began
    assert stream.statement(Level.ONE) is Level.ALL, "the transaction's level, not the session's"
    stream.ran(ROWS)
    assert stream.finish(commit=True) == Commit(captured=ROWS, level=Level.ALL)
    assert (stream.state, stream.captured, stream.deadline_s) == (StreamState.IDLE, None, math.inf)
    stream.check_invariants()


def test_begin_twice_is_refused_and_changes_nothing():
    stream = opened()
    stream.ran(ROWS)
    with pytest.raises(ActiveTransaction):
        stream.begin(11.0, Level.ONE, timeout_s=1.0)
    assert (stream.level, stream.deadline_s, stream.captured) == (Level.QUORUM, 15.0, ROWS)


@pytest.mark.parametrize("why", ["timeout", "conflict"])
def test_an_aborted_transaction_drops_its_rows_and_every_request_hears_why_until_it_ends(why: str):
    stream = opened()
    stream.ran(ROWS)
    aborted = stream.expired() if why == "timeout" else stream.conflicted("row 'k:1' of table 'k' was written")
    assert aborted.timeout is (why == "timeout")
    assert (stream.state, stream.captured, stream.deadline_s) == (StreamState.ABORTED, None, math.inf)
    stream.check_invariants()
    for _ in range(2):
        with pytest.raises(Aborted) as heard:
            stream.statement(Level.ONE)
        assert str(heard.value) == aborted.message
    with pytest.raises(ActiveTransaction):
        stream.begin(12.0, Level.ONE, timeout_s=1.0)
    with pytest.raises(Aborted):
        stream.finish(commit=True)
    assert stream.state is StreamState.IDLE, "COMMIT of an aborted transaction ends it too"
    stream.begin(13.0, Level.ONE, timeout_s=1.0)
    assert stream.statement(Level.QUORUM) is Level.ONE, "a new transaction after it"


def test_rollback_of_an_aborted_transaction_ends_it_quietly():
    stream = opened()
    stream.expired()
    assert stream.finish(commit=False) is None and stream.state is StreamState.IDLE


def test_only_an_open_transaction_can_run_a_statement_of_its_own_expire_or_conflict():
    idle = StreamTxn()
    for event in (lambda: idle.ran(ROWS), idle.expired, lambda: idle.conflicted("x")):
        with pytest.raises(LocalProtocolError):
            event()
    aborted = opened()
    aborted.expired()
    with pytest.raises(LocalProtocolError):
        aborted.expired()
