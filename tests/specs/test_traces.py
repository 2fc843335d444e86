"""Trace validation: traces of simulated runs are behaviours of `VClockReplication`, and a
trace edited to break what the spec guarantees is rejected.

The simulator runs real engines and each member's driver, the one the server runs; the
drivers trace the replication steps, the simulator the engine's and the environment's.
`specs/check_trace.py` turns the trace into a TLA+ sequence and has TLC find a behaviour of
the spec that takes every line (`specs/VClockReplicationTrace.tla` says what matching a
line means).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import check_trace
import run_tlc

# TLC stops a trace check at its own limit and says so: the test's is above it.
TLC_MARGIN_S = 300
pytestmark = pytest.mark.timeout(check_trace.TIMEOUT_S + TLC_MARGIN_S)
QUORUM_TIMEOUT_S = 600  # a QuorumCommit trace is checked under a limit of its own

needs_tlc = pytest.mark.skipif(
    run_tlc.tools_available() is not None,
    reason=f"TLC cannot run here: {run_tlc.tools_available()}",
)

Trace = list[dict[str, Any]]


@pytest.fixture(scope="module")
def small_trace() -> Trace:
    """A short clean run: three members, ten writes, every row relayed and applied."""
    return check_trace.simulate(0, wal_mode="write", faults="none", writes=10)


@pytest.fixture(scope="module")
def recovery_trace() -> Trace:
    """A short run under wal_mode=write with crashes: a member restarts, recovers its own
    rows (answers, then RecoveryFinish) and writes again."""
    return check_trace.simulate(11, wal_mode="write", faults="all", writes=12)


def index_of(trace: Trace, event: str, *, after: int = 0, **fields: Any) -> int:
    for i, line in enumerate(trace):
        if i > after and line["event"] == event and all(line.get(k) == v for k, v in fields.items()):
            return i
    raise AssertionError(f"no {event} {fields} after line {after}")


def recount(trace: Trace) -> Trace:
    """After lines were added or removed: the End line counts the steps as the
    implementation that wrote the edited trace would have."""
    trace[-1] = {"event": "End", "steps": len(trace) - 2}
    return trace


def rejected_at(trace: Trace, edited: int) -> check_trace.Verdict:
    verdict = check_trace.check(trace)
    assert not verdict.accepted, "the edited trace was accepted"
    # Line numbers count from the first step (line 0 is Init): the behaviour got as far
    # as the line before the edit, and no further.
    assert verdict.matched == edited - 1, verdict.reason
    return verdict


@needs_tlc
@pytest.mark.parametrize(
    ("seed", "wal_mode", "faults"),
    [
        (0, "write", "none"),
        (2, "write", "links"),
        (3, "write", "all"),
        (7, "write", "all"),  # a recovering member gives up on a peer that never answered
        (1, "fsync", "all"),
        (4, "fsync", "all"),
    ],
    ids=lambda v: str(v),
)
def test_simulated_traces_are_behaviours_of_the_spec(seed: int, wal_mode: str, faults: str) -> None:
    trace = check_trace.simulate(seed, wal_mode=wal_mode, faults=faults, writes=30)
    events = {line["event"] for line in trace}
    assert {"LocalWrite", "WalFlush", "RelaySend", "ApplierReceive"} <= events
    if faults == "all":
        assert {"Crash", "Restart"} <= events, "the seed was meant to crash a member"
    if faults == "all" and wal_mode == "write":
        assert {"RecoveryAnswer", "RecoveryFinish"} <= events, "the seed was meant to recover own rows"
    if seed == 7:
        assert "RecoveryGiveUp" in events, "the seed was meant to give up on a peer"
    assert_accepted(trace)


@pytest.mark.deep
@needs_tlc
@pytest.mark.parametrize("seed", range(100, 160))
@pytest.mark.parametrize("wal_mode", ["write", "fsync"])
def test_simulated_traces_are_behaviours_of_the_spec_long_sweep(seed: int, wal_mode: str) -> None:
    assert_accepted(check_trace.simulate(seed, wal_mode=wal_mode, faults="all", writes=60))


def assert_accepted(trace: Trace) -> None:
    verdict = check_trace.check(trace, timeout_s=1800)
    assert verdict.accepted, f"seed {trace[0]['seed']}: {verdict.line()}\n{verdict.output[-3000:]}"
    assert verdict.matched == len(trace) - 2 == trace[-1]["steps"] > 0


@needs_tlc
def test_a_row_applied_twice_is_rejected(small_trace: Trace) -> None:
    trace = copy.deepcopy(small_trace)
    receive = index_of(trace, "ApplierReceive", member=2)
    trace.insert(receive + 1, dict(trace[receive]))
    rejected_at(recount(trace), receive + 1)


@needs_tlc
def test_rows_of_one_origin_applied_out_of_order_are_rejected(small_trace: Trace) -> None:
    trace = copy.deepcopy(small_trace)
    first = index_of(trace, "ApplierReceive", member=3, origin=1)
    second = index_of(trace, "ApplierReceive", after=first, member=3, origin=1)
    lsns = trace[first]["lsn"], trace[second]["lsn"]
    for send, receive, lsn in ((first - 1, first, lsns[1]), (second - 1, second, lsns[0])):
        trace[send]["lsn"] = trace[receive]["lsn"] = lsn
    rejected_at(trace, first - 1)


@needs_tlc
def test_a_reused_lsn_is_rejected(small_trace: Trace) -> None:
    trace = copy.deepcopy(small_trace)
    first = index_of(trace, "LocalWrite", member=1)
    second = index_of(trace, "LocalWrite", after=first, member=1)
    trace[second]["lsn"] = trace[first]["lsn"]
    rejected_at(trace, second)


@needs_tlc
def test_a_row_shipped_before_its_origin_made_it_durable_is_rejected(small_trace: Trace) -> None:
    """FINDINGS F1: under wal_mode=write a relay ships only rows behind a WalSync."""
    trace = copy.deepcopy(small_trace)
    for sync, line in enumerate(trace):
        if line["event"] == "WalSync" and line["member"] == 1:
            after = [i for i in range(sync + 1, len(trace))
                     if trace[i]["event"] == "RelaySend" and trace[i]["peer"] == 1
                     or trace[i]["event"] == "WalSync" and trace[i]["member"] == 1]
            if after and trace[after[0]]["event"] == "RelaySend":
                break
    else:
        raise AssertionError("no sync of member 1 followed by a row it relays")
    del trace[sync]
    rejected_at(recount(trace), after[0] - 1)


@needs_tlc
def test_rows_applied_with_each_others_payloads_are_rejected(small_trace: Trace) -> None:
    """Member 3 applies 1:a holding what 1:b wrote and 1:b holding what 1:a wrote: the
    LSNs, their order and every vclock are right, only the values are not."""
    trace = copy.deepcopy(small_trace)
    first = index_of(trace, "ApplierReceive", member=3, origin=1)
    while True:
        second = index_of(trace, "ApplierReceive", after=first, member=3, origin=1)
        if trace[second]["ops"] != trace[first]["ops"]:
            break
        first = second
    trace[first]["ops"], trace[second]["ops"] = trace[second]["ops"], trace[first]["ops"]
    rejected_at(trace, first)


@needs_tlc
def test_a_table_holding_a_value_last_writer_wins_did_not_keep_is_rejected(small_trace: Trace) -> None:
    """A flush after which member 2 holds, for a key, the value of another write to it than
    the one last-writer-wins keeps."""
    trace = copy.deepcopy(small_trace)
    for flush, line in enumerate(trace):
        if line["event"] == "WalFlush" and line["member"] == 2:
            older = [(key, written) for key, (value, _, _) in line["table"].items() for w in trace[:flush]
                     if w["event"] == "LocalWrite" for k, written in w["ops"] if k == key and written not in (value, None)]
            if older:
                break
    else:
        raise AssertionError("no flush of member 2 after a key was overwritten")
    key, written = older[0]
    trace[flush]["table"][key][0] = written
    verdict = rejected_at(trace, flush)
    assert f"line {flush} of" in verdict.reason and "WalFlush" in verdict.reason


@needs_tlc
def test_a_vclock_counting_a_row_not_held_is_rejected(small_trace: Trace) -> None:
    trace = copy.deepcopy(small_trace)
    flush = index_of(trace, "WalFlush", member=3)
    trace[flush]["vclock"] = {**trace[flush]["vclock"], 2: trace[flush]["vclock"][2] + 1}
    verdict = rejected_at(trace, flush)
    assert f"line {flush} of" in verdict.reason and "WalFlush" in verdict.reason


def last_answer_before_finish(trace: Trace) -> tuple[int, int]:
    """The first RecoveryFinish followed by a write of its member, and the line of the
    last RecoveryAnswer to that member before it."""
    for finish, line in enumerate(trace):
        member = line.get("member")
        if line["event"] == "RecoveryFinish" and any(
            later["event"] == "LocalWrite" and later["member"] == member for later in trace[finish:]
        ):
            answers = [i for i in range(finish) if trace[i]["event"] == "RecoveryAnswer"
                       and trace[i]["member"] == member]
            assert answers, "the seed was meant to answer a recovery fetch"
            return answers[-1], finish
    raise AssertionError("the seed was meant to finish a recovery, then write")


@needs_tlc
def test_a_recovery_that_gave_up_on_a_peer_that_never_answered_is_accepted(recovery_trace: Trace) -> None:
    """Under ShipDurableOnly a recovering member may stop waiting for a peer whose link
    failed before it answered (the replica-set core's upstream_failed), then finish and
    take writes: the last answer before the finish becomes a give-up on that peer."""
    trace = copy.deepcopy(recovery_trace)
    answer, finish = last_answer_before_finish(trace)
    peer, member = trace[answer]["peer"], trace[answer]["member"]
    trace[answer] = {"event": "RecoveryGiveUp", "peer": peer, "member": member, "t": trace[answer]["t"]}
    assert trace[finish] == {"event": "RecoveryFinish", "member": member, "t": trace[finish]["t"]}
    assert_accepted(trace)


@needs_tlc
def test_a_recovery_finished_with_a_peer_neither_answered_nor_given_up_on_is_rejected(
    recovery_trace: Trace,
) -> None:
    trace = copy.deepcopy(recovery_trace)
    answer, finish = last_answer_before_finish(trace)
    del trace[answer]
    verdict = rejected_at(recount(trace), finish - 1)
    assert f"line {finish - 1} of" in verdict.reason and "RecoveryFinish" in verdict.reason


@needs_tlc
def test_giving_up_on_a_peer_that_already_answered_is_rejected(recovery_trace: Trace) -> None:
    trace = copy.deepcopy(recovery_trace)
    answer, finish = last_answer_before_finish(trace)
    give_up = {"event": "RecoveryGiveUp", "peer": trace[answer]["peer"], "member": trace[answer]["member"]}
    trace.insert(answer + 1, give_up)
    verdict = rejected_at(recount(trace), answer + 1)
    assert "RecoveryGiveUp" in verdict.reason


def test_the_trace_becomes_a_sequence_literal() -> None:
    stamp = 7130316800000065536
    trace = [
        {"event": "Init", "members": [1, 2], "wal_mode": "fsync"},
        {"event": "LocalWrite", "member": 1, "lsn": 1, "hlc": stamp, "ops": [["kv:1", "v00c0de"], ["kv:2", None]]},
        {"event": "WalFlush", "member": 1, "vclock": {"1": 1},
         "table": {"kv:1": ["v00c0de", stamp, 1], "kv:2": [None, stamp, 1]}},
        {"event": "End", "steps": 2},
    ]
    module, cfg = check_trace.to_module(trace, "T")
    assert '[event |-> "LocalWrite", member |-> 1, lsn |-> 1, hlc |-> 1, ops |-> ' in module
    assert '[key |-> "kv:1", val |-> "v00c0de"]' in module and '[key |-> "kv:2", val |-> DELETE]' in module
    assert "vclock |-> (1 :> 1 @@ 2 :> 0)" in module
    assert ('table |-> ("kv:1" :> [val |-> "v00c0de", hlc |-> 1, origin |-> 1] @@ '
            '"kv:2" :> [val |-> DELETE, hlc |-> 1, origin |-> 1])') in module
    assert 'TraceKeys == {"kv:1", "kv:2"}' in module and "TraceWrites == 1" in module
    assert '"End"' not in module
    assert "TraceLog <- Log" in cfg and "NoDoubleApply" in cfg


def test_a_trace_without_steps_or_cut_short_is_rejected_without_tlc(small_trace: Trace) -> None:
    """Any spec takes a trace of no step, and a cut trace hides what followed the cut."""
    init, steps, end = small_trace[0], small_trace[1:-1], small_trace[-1]
    assert end == {"event": "End", "steps": len(steps)} and steps
    cases = {
        "the trace holds no step": [init, {"event": "End", "steps": 0}],
        f"the trace holds 10 steps, its End line says {len(steps)}": [init, *steps[:10], end],
        "the trace has no End line: it was cut short": [init, *steps],
    }
    for reason, trace in cases.items():
        verdict = check_trace.check(trace)
        assert (verdict.accepted, verdict.reason, verdict.output) == (False, reason, "")


@pytest.mark.parametrize(
    "trace",
    [
        [],
        [{"event": "LocalWrite", "member": 1}],
        [{"event": "Init", "wal_mode": "write"}],
        [{"event": "Init", "members": [1], "wal_mode": 'a"b'}],
    ],
    ids=["empty", "no Init line", "no members", "unquotable string"],
)
def test_a_malformed_trace_is_refused_with_a_reason(trace: Trace) -> None:
    with pytest.raises(check_trace.TraceError):
        check_trace.to_module(trace, "T")


def test_the_verdict_names_the_first_line_no_behaviour_takes() -> None:
    trace = [{"event": "Init"}, {"event": "LocalWrite", "lsn": 1}, {"event": "WalFlush", "lsn": 9}]
    output = '<<"matched", 1>>\nModel checking completed. No error has been found.\n'
    verdict = check_trace.judge(trace, output, 1.0, False)
    assert not verdict.accepted and verdict.matched == 1
    assert verdict.reason.startswith('line 2 of 2 is no step of the spec: {"event": "WalFlush"')
    done = check_trace.judge(trace, output + '<<"matched", 2>>\n', 1.0, False)
    assert done.accepted
    broken = check_trace.judge(trace, output + "Error: Invariant Agreement is violated.\n", 1.0, False)
    assert not broken.accepted and "Agreement" in broken.reason


# ---------------------------------------------------------------- QuorumCommit


def quorum_trace(seed: int) -> Trace:
    """Single-key QUORUM transactions beside single-key ONE writes, with process crashes."""
    return check_trace.simulate(seed, wal_mode="fsync", faults="all", writes=20, quorum=25)


@pytest.fixture(scope="module")
def crashing_quorum_trace() -> Trace:
    return quorum_trace(13)


def assert_quorum_accepted(trace: Trace) -> check_trace.Verdict:
    verdict = check_trace.check(trace, spec=check_trace.QUORUM, timeout_s=QUORUM_TIMEOUT_S)
    assert verdict.accepted, f"seed {trace[0]['seed']}: {verdict.line()}\n{verdict.output[-3000:]}"
    assert verdict.matched == len(check_trace.quorum_steps(trace)) > 0
    return verdict


def quorum_rejected_at(trace: Trace, edited: dict[str, Any]) -> check_trace.Verdict:
    """The behaviour got as far as the QuorumCommit line before `edited`, and no further."""
    verdict = check_trace.check(recount(trace), spec=check_trace.QUORUM)
    assert not verdict.accepted, "the edited trace was accepted"
    line = next(i for i, step in enumerate(check_trace.quorum_steps(trace)) if step is edited)
    assert verdict.matched == line, verdict.reason
    return verdict


@needs_tlc
@pytest.mark.timeout(QUORUM_TIMEOUT_S + TLC_MARGIN_S)
@pytest.mark.parametrize("seed", [13, 19])
def test_simulated_quorum_traces_are_behaviours_of_quorum_commit(seed: int, crashing_quorum_trace: Trace) -> None:
    trace = crashing_quorum_trace if seed == 13 else quorum_trace(seed)
    events = {line["event"] for line in trace}
    assert {"Begin", "Prepare", "DecideCommit", "DecideAbort", "ParticipantAbort", "Crash", "Restart"} <= events
    assert_quorum_accepted(trace)


@needs_tlc
@pytest.mark.timeout(QUORUM_TIMEOUT_S + TLC_MARGIN_S)
def test_a_question_that_finds_no_decision_aborts_and_the_trace_is_accepted(tmp_path) -> None:
    """The coordinator hears no answer and sends no heartbeat: the participants ask, and
    the question decides ABORT (the spec's QueryDecision)."""
    from replicaset.sim import NO_FAULTS, QuorumWorkload, Simulation

    upsert = "INSERT INTO kv(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v"
    trace: Trace = []
    sim = Simulation(tmp_path / "run", seed=1, faults=NO_FAULTS, writes=5, wal_mode="fsync", trace=trace.append,
                     quorum=QuorumWorkload(), script=[(0.5, lambda s: s.begin(1, [(upsert, (1, "asked"))]))],
                     fault_phase_s=1.5)
    sim.drop_txn = lambda src, dst, kind: dst == 1 and kind == "answer" or kind == "heartbeat"
    try:
        sim.run()
        sim.check()
    finally:
        sim.close()
    assert "QueryDecision" in {line["event"] for line in trace}
    assert_quorum_accepted(trace)


@needs_tlc
def test_a_commit_without_a_quorum_of_prepared_members_is_rejected(crashing_quorum_trace: Trace) -> None:
    trace = copy.deepcopy(crashing_quorum_trace)
    for commit, line in enumerate(trace):
        if line["event"] == "DecideCommit":
            prepares = [i for i in range(commit) if trace[i]["event"] == "Prepare" and trace[i]["txn"] == line["txn"]]
            if len(prepares) == 2:
                break
    else:
        raise AssertionError("no commit decided with two members prepared")
    other = next(i for i in prepares if trace[i]["member"] != line["member"])
    del trace[other]
    verdict = quorum_rejected_at(trace, trace[commit - 1])
    assert "DecideCommit" in verdict.reason


@needs_tlc
def test_a_prepare_on_a_key_an_intent_holds_is_rejected(crashing_quorum_trace: Trace) -> None:
    """A member prepares a transaction for a key that its intent for that very
    transaction holds already: a second intent on a key is no step."""
    trace = copy.deepcopy(crashing_quorum_trace)
    prepare = index_of(trace, "Prepare")
    trace.insert(prepare + 1, dict(trace[prepare]))
    quorum_rejected_at(trace, trace[prepare + 1])


@needs_tlc
def test_a_quorum_row_applied_twice_is_rejected(crashing_quorum_trace: Trace) -> None:
    trace = copy.deepcopy(crashing_quorum_trace)
    commit = index_of(trace, "DecideCommit")
    receive = index_of(trace, "ApplierReceive", after=commit, origin=trace[commit]["member"])
    trace.insert(receive + 1, dict(trace[receive]))
    quorum_rejected_at(trace, trace[receive + 1])


def test_a_quorum_trace_becomes_a_sequence_literal() -> None:
    trace = [
        {"event": "Init", "members": [1, 2, 3], "wal_mode": "fsync"},
        {"event": "LocalWrite", "member": 3, "lsn": 1, "hlc": 500, "ops": [["kv:1", "v00c0de"]]},
        {"event": "WalFlush", "member": 3, "vclock": {"3": 1}, "table": {}},
        {"event": "Begin", "member": 1, "txn": 77, "reads": {"kv:1": [0, 0]}},
        {"event": "Prepare", "member": 1, "txn": 77},
        {"event": "DecideCommit", "member": 1, "txn": 77, "lsn": 1, "hlc": 900},
        {"event": "End", "steps": 5},
    ]
    module, cfg = check_trace.to_quorum_module(check_trace.quorum_events(trace), "T")
    assert '[event |-> "WriteOne", member |-> 3, lsn |-> 1, hlc |-> 1, key |-> "kv:1"]' in module
    assert '[event |-> "Begin", member |-> 1, txn |-> "t1", key |-> "kv:1", hlc |-> 0, origin |-> 0]' in module
    assert '[event |-> "DecideCommit", member |-> 1, lsn |-> 1, txn |-> "t1", hlc |-> 2]' in module
    assert "WalFlush" not in module and 'TraceTxns == {"t1"}' in module and "TraceOnes == 1" in module
    assert "NoLostUpdate" in cfg and "TraceLog <- Log" in cfg
    with pytest.raises(check_trace.TraceError, match="one key"):
        check_trace.quorum_steps([trace[0], {**trace[1], "ops": [["kv:1", "a"], ["kv:2", "b"]]}])


# ---------------------------------------------------------------- Swim


def swim_trace(seed: int, *, faults: str = "none", pauses: tuple[tuple[float, int, float], ...] = ((0.8, 3, 1.5),),
               members: int = 3) -> Trace:
    """SWIM on every member (5% of datagrams lost until the heal) beside ten writes, and a
    member paused past the DEAD bound: suspicions, deaths, refutations, losses."""
    return check_trace.simulate(seed, wal_mode="fsync", faults=faults, writes=10, swim=True, pauses=pauses,
                                members=members)


@pytest.fixture(scope="module")
def paused_swim_trace() -> Trace:
    return swim_trace(1)


def assert_swim_accepted(trace: Trace) -> check_trace.Verdict:
    verdict = check_trace.check(trace, spec=check_trace.SWIM, timeout_s=600)
    assert verdict.accepted, f"seed {trace[0]['seed']}: {verdict.line()}\n{verdict.output[-3000:]}"
    assert verdict.matched == len(check_trace.swim_steps(trace)) > 0
    return verdict


def swim_rejected_at(trace: Trace, line: int, event: str, nth: int = 0) -> check_trace.Verdict:
    """The behaviour got as far as the Swim line before the `nth` `event` line made of
    trace line `line` (its `nth` update), and no further."""
    verdict = check_trace.check(trace, spec=check_trace.SWIM)
    assert not verdict.accepted, "the edited trace was accepted"
    steps = check_trace.swim_steps(trace)
    edited = [i for i, step in enumerate(steps) if step["line"] == line and step["event"] == event][nth]
    assert verdict.matched == edited, verdict.reason
    return verdict


def revivals(trace: Trace) -> list[tuple[int, Any, list[Any]]]:
    """`(line, member, entry held before)` for each receipt after which a view holds a
    member ALIVE that it held SUSPECT or DEAD before; the member as the view's key (an
    int, a string once the trace went through JSON)."""
    held: dict[int, dict[str, list[Any]]] = {}
    found = []
    for i, line in enumerate(trace):
        if "view" not in line or line["event"] not in ("PingReceived", "TickProbeFailed", "TickDead", "Restart"):
            continue
        before = held.get(line["member"], {})
        for member, (state, _) in line["view"].items():
            if state == "alive" and before.get(member, ["alive"])[0] in ("suspect", "dead"):
                found.append((i, member, before[member]))
        held[line["member"]] = line["view"]
    return found


@needs_tlc
@pytest.mark.parametrize(("seed", "faults", "members"), [(1, "none", 3), (3, "all", 3), (6, "all", 4)])
def test_simulated_swim_traces_are_behaviours_of_swim(seed: int, faults: str, members: int,
                                                      paused_swim_trace: Trace) -> None:
    trace = paused_swim_trace if (seed, faults, members) == (1, "none", 3) else swim_trace(
        seed, faults=faults, members=members)
    events = {line["event"] for line in trace}
    assert {"TickPing", "PingReceived", "TickProbeFailed", "TickDead", "Lose", "Pause", "Resume"} <= events
    if faults == "all":
        assert {"Crash", "Restart"} <= events, "the seed was meant to crash a member"
    assert revivals(trace), "the seed was meant to revive a member by its refutation"
    assert_swim_accepted(trace)


@pytest.mark.deep
@needs_tlc
@pytest.mark.parametrize("seed", range(100, 130))
def test_simulated_swim_traces_are_behaviours_of_swim_long_sweep(seed: int) -> None:
    assert_swim_accepted(swim_trace(seed, faults="all", members=3 + seed % 3,
                                    pauses=((0.5, 2, 0.4 + seed % 5 * 0.5), (2.5, 3, 0.3))))


@needs_tlc
def test_a_member_revived_at_an_equal_incarnation_is_rejected(paused_swim_trace: Trace) -> None:
    """The view after a refutation arrived shows the member ALIVE again at the incarnation
    it was accused at, as a core taking a stale ALIVE over a suspicion would
    (Swim_EqualIncarnationAlive)."""
    trace = copy.deepcopy(paused_swim_trace)
    line, member, (state, incarnation) = revivals(trace)[0]
    trace[line]["view"][member] = ["alive", incarnation]
    verdict = swim_rejected_at(trace, line, "View")
    assert "View" in verdict.reason


@needs_tlc
def test_a_core_that_revives_at_an_equal_incarnation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug itself, in the core: ALIVE taken at an equal incarnation over SUSPECT or DEAD.
    The simulator's own checks pass; the trace is no behaviour of the spec."""
    from replicaset.core import swim

    states = swim.MemberState
    monkeypatch.setitem(swim.EQUAL_INCARNATION_MOVES, states.SUSPECT, frozenset({states.DEAD, states.ALIVE}))
    monkeypatch.setitem(swim.EQUAL_INCARNATION_MOVES, states.DEAD, frozenset({states.ALIVE}))
    verdict = check_trace.check(swim_trace(1), spec=check_trace.SWIM)
    assert not verdict.accepted and "View" in verdict.reason, verdict.reason


@needs_tlc
def test_a_member_suspecting_another_at_an_incarnation_it_never_took_is_rejected(paused_swim_trace: Trace) -> None:
    trace = copy.deepcopy(paused_swim_trace)
    line = next(i for i, e in enumerate(trace) if e["event"] == "TickProbeFailed" and "view" in e)
    suspect = trace[line]
    suspect["inc"] += 1
    suspect["view"][suspect["peer"]][1] += 1
    verdict = swim_rejected_at(trace, line, "TickProbeFailed")
    assert "TickProbeFailed" in verdict.reason


@needs_tlc
def test_gossip_raising_another_members_incarnation_is_rejected(paused_swim_trace: Trace) -> None:
    """A member tells a peer of a third member at an incarnation above the one it holds:
    only a member raises its own."""
    trace = copy.deepcopy(paused_swim_trace)
    line, index = next((i, k) for i, e in enumerate(trace) if e["event"] == "TickPing"
                       for k, (about, _, _) in enumerate(e["updates"]) if about not in (e["member"], e["peer"]))
    trace[line]["updates"][index][2] += 1
    verdict = swim_rejected_at(trace, line, "TickPing", index)
    assert "TickPing" in verdict.reason


@needs_tlc
def test_a_message_taken_twice_is_rejected(paused_swim_trace: Trace) -> None:
    """A datagram received twice though sent once (the network has no copy of it left)."""
    trace = copy.deepcopy(paused_swim_trace)
    receipt = index_of(trace, "PingReceived", member=2, peer=1)
    trace.insert(receipt + 1, copy.deepcopy(trace[receipt]))
    verdict = swim_rejected_at(recount(trace), receipt + 1, "PingReceived")
    assert "PingReceived" in verdict.reason


def test_a_swim_trace_becomes_one_line_per_datagram() -> None:
    trace = [
        {"event": "Init", "members": [1, 2], "wal_mode": "fsync"},
        {"event": "LocalWrite", "member": 1, "lsn": 1, "hlc": 5, "ops": [["kv:1", "v1"]]},
        {"event": "TickPing", "member": 1, "peer": 2, "updates": [[1, "alive", 0], [2, "suspect", 0]], "t": 0.1},
        {"event": "PingReceived", "member": 2, "peer": 1, "updates": [[1, "alive", 0], [2, "suspect", 0]],
         "view": {"1": ["alive", 0], "2": ["alive", 1]}, "t": 0.2},
        {"event": "Crash", "member": 2, "os": False},
        {"event": "End", "steps": 4},
    ]
    steps = check_trace.swim_steps(trace)
    assert [(s["event"], s["line"]) for s in steps] == [
        ("TickPing", 2), ("TickPing", 2), ("PingReceived", 3), ("LoseAck", 3), ("PingReceived", 3), ("LoseAck", 3),
        ("View", 3), ("Pause", 4)]
    module, cfg = check_trace.to_swim_module(check_trace.swim_events(trace), "T")
    assert '[event |-> "TickPing", member |-> 1, peer |-> 2, about |-> 2, inc |-> 0, st |-> "suspect"]' in module
    assert ('[event |-> "View", member |-> 2, view |-> (1 :> [st |-> "alive", inc |-> 0] @@ '
            '2 :> [st |-> "alive", inc |-> 1])]') in module
    assert "TraceMsgs == 3" in module and "TracePauses == 1" in module and "LocalWrite" not in module
    assert "NoStaleRevival" in cfg and "IncarnationsGrow" in cfg
    with pytest.raises(check_trace.TraceError, match="a view holds members"):
        check_trace.to_swim_module([trace[0], {**trace[3], "event": "View", "view": {"1": ["alive", 0]}}], "T")
