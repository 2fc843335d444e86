"""Quorum transactions in the simulator: the member driver's coordinator and participant,
driven as the server's QuorumHost drives them, over simulated links that delay, drop and
partition, on members that crash and restart from their metastore.

Bank transfers under faults keep the total and every acknowledged transfer; scripted
scenarios check what each recovery path ends in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replicaset.core import quorum as q
from replicaset.sim import NO_FAULTS, Bank, Client, Faults, QuorumWorkload, Simulation, Statement, StreamBank, _rows
from replicaset.storage.transactions import Transactions
from tests.sim.simkit import simulate

UPSERT = "INSERT INTO kv(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v"


def outcomes(sim: Simulation) -> dict[str, int]:
    counts: dict[str, int] = {}
    for client in sim.clients.values():
        kind = "acked" if client.row else type(client.error).__name__ if client.error else "unknown"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@pytest.mark.parametrize(("seed", "members", "wal_mode"),
                         [(1, 3, "fsync"), (2, 3, "write"), (3, 5, "write"), (6, 4, "fsync")])
def test_bank_transfers_under_crashes_and_drops_keep_the_total_and_every_acknowledged_transfer(
        tmp_path: Path, seed: int, members: int, wal_mode: str) -> None:
    sim = simulate(tmp_path, seed, members=members, wal_mode=wal_mode, writes=0, quorum=Bank(transactions=30))
    seen = outcomes(sim)
    assert seen.get("acked", 0) >= 3, seen
    assert seen.get("Conflict", 0) >= 1, f"the seed was meant to have transfers conflict: {seen}"
    assert sim.members_crashed, "the seed was meant to crash a member"


def test_bank_transfers_without_faults_are_all_acknowledged_or_conflict(tmp_path: Path) -> None:
    sim = simulate(tmp_path, 1, faults=NO_FAULTS, writes=0, quorum=Bank(transactions=30), wal_mode="fsync")
    assert set(outcomes(sim)) <= {"acked", "Conflict"} and outcomes(sim)["acked"] >= 25


@pytest.mark.parametrize(("seed", "faults"), [(11, NO_FAULTS), (12, NO_FAULTS), (13, Faults()), (14, Faults())])
def test_stream_transfers_interleaved_on_each_member_conflict_and_lose_nothing(
        tmp_path: Path, seed: int, faults: Faults) -> None:
    """Transfers as stream transactions whose statements interleave on one member with
    other streams' (the server's sessions): some conflict, none stalls another, and the
    balances are exactly what the logged transfers moved."""
    bank = StreamBank(transactions=40)
    sim = simulate(tmp_path, seed, faults=faults, writes=0, quorum=bank, wal_mode="write")
    assert sim.stream_conflicts >= 1, "the seed was meant to have streams on one member conflict"
    assert outcomes(sim).get("acked", 0) >= 5, outcomes(sim)


def test_a_stream_that_ignored_what_it_read_would_lose_a_transfer(tmp_path: Path, monkeypatch) -> None:
    """Without the conflict on a table read then written by another transaction, a transfer
    committed between a stream's read of a balance and its write of it is lost."""
    monkeypatch.setattr(Transactions, "note_reads", lambda self, txn, reads, writes: None)
    with pytest.raises(AssertionError, match="balances"):
        simulate(tmp_path, 11, faults=NO_FAULTS, writes=0, quorum=StreamBank(transactions=40), wal_mode="write")


def test_a_balance_no_transfer_explains_would_be_caught(tmp_path: Path) -> None:
    bank = Bank(transactions=10)
    sim = Simulation(tmp_path / "x", seed=1, faults=NO_FAULTS, writes=0, quorum=bank, wal_mode="fsync")
    try:
        sim.run()
        sim.check()
        bank.asked = {n: (src, dst, amount + 1) for n, (src, dst, amount) in bank.asked.items()}
        with pytest.raises(AssertionError, match="logs transfer .* nobody asked for"):
            sim.check()
    finally:
        sim.close()


def test_a_commit_without_a_quorum_of_the_membership_would_be_caught(tmp_path: Path, monkeypatch) -> None:
    """Counting the members that answer instead of the membership: the simulator's own
    record of who prepared says the commit had too few."""
    monkeypatch.setattr(q.Transaction, "needed", property(lambda txn: 1))
    sim = Simulation(tmp_path / "x", seed=1, faults=NO_FAULTS, writes=0, quorum=QuorumWorkload(),
                     script=[(0.5, lambda s: s.begin(1, [(UPSERT, (1, "alone"))]))], wal_mode="fsync")
    sim.drop_txn = lambda src, dst, kind: kind == "prepare"
    try:
        with pytest.raises(AssertionError, match=r"commits with \[1\] prepared of \[1, 2, 3\]"):
            sim.run()
    finally:
        sim.close()


# ---------------------------------------------------------------- scenarios


class Scenario:
    """Transactions begun by a script, their clients by name, and the value of each key on
    every member at the end."""

    def __init__(self, tmp_path: Path, *, members: int = 3) -> None:
        self.tmp_path = tmp_path
        self.members = members
        self.clients: dict[str, Client | None] = {}
        self.script: list[tuple[float, Callable[[Simulation], Any]]] = []
        self.drop: Callable[[int, int, str], bool] = lambda src, dst, kind: False
        self.seen: dict[str, Any] = {}

    def begin(self, at_s: float, name: str, member: int, key: int, level: q.Level = q.Level.QUORUM) -> None:
        statements: list[Statement] = [(UPSERT, (key, name))]

        async def step(sim: Simulation) -> None:
            self.clients[name] = await sim.begin(member, statements, level)

        self.script.append((at_s, step))

    def at(self, at_s: float, step: Callable[[Simulation], Any]) -> None:
        self.script.append((at_s, step))

    def run(self) -> Simulation:
        sim = Simulation(self.tmp_path / "run", seed=1, members=self.members, faults=NO_FAULTS, writes=0,
                         quorum=QuorumWorkload(), script=self.script, fault_phase_s=2.0, wal_mode="fsync")
        sim.drop_txn = self.drop
        try:
            sim.run()
            sim.check()
            self.values = [{k: v for k, v in _rows(m.engine, "SELECT k, v FROM kv")} for m in sim.members.values()]
        finally:
            sim.close()
        assert all(values == self.values[0] for values in self.values), self.values
        for member in sim.members.values():
            assert member.driver is not None and not member.driver.participant.pending
        return sim

    def client(self, name: str) -> Client:
        client = self.clients[name]
        assert client is not None
        return client


def test_a_minority_cannot_commit_and_the_majority_can(tmp_path: Path) -> None:
    s = Scenario(tmp_path, members=5)
    s.at(0.5, lambda sim: sim.partition([1, 2], [3, 4, 5]))
    s.begin(0.6, "minority", 1, key=1)
    s.begin(0.6, "majority", 4, key=2)
    s.run()
    assert isinstance(s.client("minority").error, q.Timeout)
    assert s.client("majority").row is not None
    assert s.values[0] == {2: "majority"}


def test_partial_prepare_commits_under_quorum_and_aborts_under_all(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.drop = lambda src, dst, kind: kind == "prepare" and dst == 3
    s.begin(0.5, "quorum", 1, key=1, level=q.Level.QUORUM)
    s.begin(0.5, "all", 2, key=2, level=q.Level.ALL)
    s.run()
    assert s.client("quorum").row is not None
    assert isinstance(s.client("all").error, q.Timeout)
    assert s.values[0] == {1: "quorum"}


def test_a_coordinator_crashed_after_prepare_leaves_intents_that_its_restart_resolves(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.drop = lambda src, dst, kind: kind == "answer" and dst == 1  # it never hears back: no decision
    s.begin(0.5, "orphan", 1, key=1)
    s.at(0.55, lambda sim: sim.crash(1))
    s.at(0.7, lambda sim: s.seen.update(held={i: set(sim.members[i].driver.participant.pending) for i in (2, 3)}))
    s.run()
    txn_id = s.client("orphan").txn_id
    assert s.seen["held"] == {2: {txn_id}, 3: {txn_id}}, "the participants were meant to hold intents"
    orphan = s.client("orphan")
    assert orphan.row is None and orphan.error is None, "its client died with the coordinator"
    assert s.values[0] == {}


def test_a_participant_crashed_during_commit_catches_up(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.drop = lambda src, dst, kind: kind == "commit" and dst == 3
    s.begin(0.5, "committed", 1, key=1)
    s.at(0.53, lambda sim: sim.crash(3))
    s.at(0.6, lambda sim: s.seen.update(down=sim.members[3].engine is None))
    sim = s.run()
    assert s.seen["down"]
    assert s.client("committed").row is not None
    assert s.values[2] == {1: "committed"} and sim.members[3].incarnation == 1


def test_conflicting_writes_to_one_row_from_two_members_one_wins(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.begin(0.5, "from 1", 1, key=1)
    s.begin(0.5, "from 2", 2, key=1)
    s.run()
    results = {name: (client.row is not None, type(client.error).__name__)
               for name, client in s.clients.items() if client is not None}
    winners = [name for name, (acked, _) in results.items() if acked]
    assert len(winners) == 1, results
    loser = ({"from 1", "from 2"} - set(winners)).pop()
    assert results[loser] == (False, "Conflict")
    assert s.values[0] == {1: winners[0]}


def test_six_members_split_three_and_three_commit_on_neither_side(tmp_path: Path) -> None:
    s = Scenario(tmp_path, members=6)
    s.at(0.5, lambda sim: sim.partition([1, 2, 3], [4, 5, 6]))
    s.begin(0.6, "left", 1, key=1)
    s.begin(0.6, "right", 4, key=2)
    s.run()
    assert isinstance(s.client("left").error, q.Timeout) and isinstance(s.client("right").error, q.Timeout)
    assert s.values[0] == {}


@pytest.mark.parametrize("seed", [21, 35])
def test_bank_transfers_survive_os_crashes_under_wal_mode_write(tmp_path: Path, seed: int) -> None:
    """Every crash an OS crash, losing what the WAL had not synced. Seed 21 failed its
    balances when a participant released an intent on a row the crash then took (a
    transfer decided on the stale balance overwrote another); seed 35 had a member told
    ABORT for a transaction it held committed when COMMIT carried a row its coordinator
    lost."""
    sim = simulate(tmp_path, seed, members=3, wal_mode="write", writes=0, quorum=Bank(transactions=30),
                   faults=Faults(crash_per_s=3.0, os_crash_share=1.0))
    assert sim.os_crashes >= 5, "the seed was meant to crash the OS again and again"
    assert sim.collected > 0, "decided records are collected under the faults too"
    assert outcomes(sim).get("acked", 0) >= 3, outcomes(sim)
