"""Quorum writes on real processes under faults (docs/design/README.md §4.5): a coordinator or a
participant killed with -9 around the decision, rivals on one row, a 6-member set split
3/3, bank transfers while members die and hang, and 10-statement stream transactions.
Whatever happens, a transaction is on every member or on none, an acknowledged one is on
every member, and intents never outlive their transaction's outcome."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import QUORUM, SYNCHRO_TIMEOUT_S, ReplicaSet, Server, quorum_set_of, wait_for
from tests.server.test_replicaset import rows

# A QUORUM write on 127.0.0.1 takes about 20 ms: kills at these delays land before the
# PREPARE, between the votes and the decision, while the row is written, and after it.
KILL_DELAYS_S = (0.0, 0.004, 0.007, 0.010, 0.013, 0.018, 0.024)
ANSWER_MARGIN_S = 1.5  # over synchro_timeout_s, for an error to come back
# The errors that say a transaction was aborted: at its deadline, or at a member's question.
ABORTED = (ErrorCode.SYNC_QUORUM_TIMEOUT, ErrorCode.QUORUM_WAIT)
CONFLICT = re.compile(r"row kv:1 of table kv: (it is held by transaction 0x[0-9a-f]+|it changed since it was read)")


def _quorum_write(member: Server, sql: str, binds: list[Any] | None = None) -> bool:
    """One QUORUM write; False when it was refused with a conflict (retry it)."""
    with member.client() as client:
        try:
            client.execute(sql, binds or [], options=QUORUM)
        except ServerError as exc:
            assert exc.code == ErrorCode.TRANSACTION_CONFLICT, exc
            return False
    return True


def _quorum_write_at(member: Server, level: str, sql: str) -> None:
    with member.client() as client:
        client.execute(sql, options={"consistency": level})


def _in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` in a thread; the dict gets its "result" or its "error"."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except (ServerError, OSError) as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _same_everywhere(rs: ReplicaSet, members: list[Server], sql: str = "SELECT * FROM kv ORDER BY k") -> list:
    """The rows `sql` reads, once every member runs and they converged: the same on each."""
    stopped = [m.log_path for m in members if m.proc is None or m.proc.poll() is not None]
    assert not stopped, f"members stopped on their own: {stopped}"
    rs.wait_converged(members)
    seen = [rows(member, sql) for member in members]
    assert all(s == seen[0] for s in seen), seen
    return seen[0]


# ---------------------------------------------------------------- a coordinator dies


def test_a_coordinator_killed_before_deciding_blocks_its_row_until_it_restarts_and_aborts(quorum_set) -> None:
    """An ALL write on member 1 holds intents on members 1 and 2 while member 3 hangs;
    member 1 is killed -9, then member 3 runs again and prepares too. The participants
    ask but never abort on their own: the row stays refused. Member 1 restarts, finds no
    row of the transaction, aborts it, and the row takes a write through every member;
    nothing of the dead transaction is anywhere."""
    rs, (first, second, third) = quorum_set
    assert _quorum_write(first, "INSERT INTO kv(k, v) VALUES (0, 'links open')")  # PREPAREs reach a hung member
    with third.paused():
        doomed = "INSERT INTO kv(k, v) VALUES (1, 'doomed')"
        holder, outcome = _in_background(lambda: _quorum_write_at(first, "all", doomed))
        time.sleep(SYNCHRO_TIMEOUT_S / 4)
        first.kill()
        holder.join(10)
    assert isinstance(outcome.get("error"), OSError), outcome  # the client lost its coordinator
    time.sleep(10 * 0.1)  # ten replication timeouts: member 2 asked about it (after four) and asked again
    with second.client() as client, pytest.raises(ServerError) as refused:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'rival')", options=QUORUM)
    assert refused.value.code == ErrorCode.TRANSACTION_CONFLICT, refused.value
    assert CONFLICT.search(refused.value.message) and "held by transaction" in refused.value.message, refused.value

    first.start()
    for n, member in enumerate((second, third, first)):
        wait_for(lambda: _quorum_write(member, "INSERT INTO kv(k, v, n) VALUES (1, 'after', ?) "
                                               "ON CONFLICT(k) DO UPDATE SET n = excluded.n", [n]),
                 f"a QUORUM write of row 1 through member {n + 2}", timeout_s=10)
        _same_everywhere(rs, [first, second, third])
    assert _same_everywhere(rs, [first, second, third]) == [[0, "links open", 0], [1, "after", 2]]
    aborted = [e for e in first.log_events() if e.get("event") == "txn_aborted"]
    assert [e["reason"] for e in aborted].count("the coordinator restarted") == 1, aborted


def test_a_coordinator_killed_around_its_decision_commits_everywhere_or_nowhere(quorum_set) -> None:
    """Member 1 adds one to a counter at QUORUM and is killed -9 after a delay from 0 to
    24 ms, then restarted: each round the increment is on every member or on none (on
    every member if it was acknowledged), and member 2 can write the row afterwards."""
    rs, (first, second, third) = quorum_set
    assert _quorum_write(first, "INSERT INTO kv(k, v, n) VALUES (1, 'counter', 0)")
    expected = 0
    outcomes = []
    for delay_s in KILL_DELAYS_S:
        _same_everywhere(rs, [first, second, third])
        writer, outcome = _in_background(lambda: _quorum_write(first, "UPDATE kv SET n = n + 1 WHERE k = 1"))
        time.sleep(delay_s)
        first.kill()
        writer.join(10)
        first.start()
        [[_, _, n]] = _same_everywhere(rs, [first, second, third])
        assert n in (expected, expected + 1), (delay_s, n, expected)
        if outcome.get("result") is True:
            assert n == expected + 1, f"an acknowledged increment was lost (kill after {delay_s} s)"
        outcomes.append((delay_s, outcome, n > expected))
        wait_for(lambda: _quorum_write(second, "UPDATE kv SET n = n + 1 WHERE k = 1"),
                 f"member 2 writes the row after the kill at {delay_s} s", timeout_s=10)
        expected = n + 1
    assert _same_everywhere(rs, [first, second, third]) == [[1, "counter", expected]], outcomes


def test_coordinators_hung_past_the_deadline_report_the_abort_never_a_commit(quorum_set) -> None:
    """Member 3 hangs, so ALL writes on members 1 and 2 stay undecided; both hang too
    until their deadlines have passed. When one runs again its client's wait and its
    tick both see the deadline, in the order trio picks: the transaction is aborted and
    the client hears so (216, or 222 when the other member's question came first), never
    "committed" (78), and it is nowhere. Two rounds of two coordinators: four draws."""
    rs, (first, second, third) = quorum_set
    with third.paused():
        for round_ in range(2):
            writers = [_in_background(lambda k=k, member=member: _quorum_write_at(
                           member, "all", f"INSERT INTO kv(k, v) VALUES ({k}, 'hung')"))
                       for k, member in ((10 * round_ + 1, first), (10 * round_ + 2, second))]
            time.sleep(SYNCHRO_TIMEOUT_S / 8)
            with first.paused(), second.paused():
                time.sleep(SYNCHRO_TIMEOUT_S)
            for writer, outcome in writers:
                writer.join(SYNCHRO_TIMEOUT_S + ANSWER_MARGIN_S)
                error = outcome.get("error")
                assert isinstance(error, ServerError) and error.code in ABORTED, (round_, outcome)
                assert "2 of 3 members prepared" in error.message, error
    assert _same_everywhere(rs, [first, second, third]) == []


# ---------------------------------------------------------------- a participant dies


def test_a_participant_killed_around_the_commit_catches_up_and_the_client_hears_success(quorum_set) -> None:
    """Member 2 is killed -9 at delays from 0 to 24 ms into a QUORUM write on member 1:
    members 1 and 3 are a quorum, so the client hears success every time; member 2
    restarts, holds the row, and takes a write of it."""
    rs, (first, second, third) = quorum_set
    assert _quorum_write(first, "INSERT INTO kv(k, v, n) VALUES (1, 'counter', 0)")
    for round_, delay_s in enumerate(KILL_DELAYS_S):
        _same_everywhere(rs, [first, second, third])
        writer, outcome = _in_background(lambda: _quorum_write(first, "UPDATE kv SET n = n + 1 WHERE k = 1"))
        time.sleep(delay_s)
        second.kill()
        writer.join(SYNCHRO_TIMEOUT_S + ANSWER_MARGIN_S)
        assert outcome == {"result": True}, (delay_s, outcome)
        second.start()
        assert _same_everywhere(rs, [first, second, third]) == [[1, "counter", 2 * round_ + 1]]
        wait_for(lambda: _quorum_write(second, "UPDATE kv SET n = n + 1 WHERE k = 1"),
                 f"member 2 writes the row after its kill at {delay_s} s", timeout_s=10)
    assert _same_everywhere(rs, [first, second, third]) == [[1, "counter", 2 * len(KILL_DELAYS_S)]]


# ---------------------------------------------------------------- rivals


def test_rival_increments_through_every_member_are_each_counted_once(quorum_set) -> None:
    """Three threads, one per member, add one to the same counter at QUORUM in lockstep
    rounds, retrying after a conflict: every conflict names the row and why, every
    increment is acknowledged once, and the counter holds exactly that many."""
    rs, members = quorum_set
    assert _quorum_write(members[0], "INSERT INTO kv(k, v, n) VALUES (1, 'counter', 0)")
    rs.wait_converged()
    rounds, attempts_max = 12, 200
    barrier = threading.Barrier(len(members), timeout=30)
    acked = [0] * len(members)
    conflicts: list[str] = []
    failures: list[BaseException] = []

    def add(index: int, member: Server) -> None:
        rng = random.Random(index)
        try:
            with member.client() as client:
                for _ in range(rounds):
                    barrier.wait()
                    for _ in range(attempts_max):
                        try:
                            client.execute("UPDATE kv SET n = n + 1 WHERE k = 1", options=QUORUM)
                        except ServerError as exc:
                            if exc.code != ErrorCode.TRANSACTION_CONFLICT:
                                raise
                            conflicts.append(exc.message)
                            time.sleep(rng.uniform(0, 0.02))
                            continue
                        acked[index] += 1
                        break
        except (ServerError, OSError, threading.BrokenBarrierError) as exc:
            failures.append(exc)
            barrier.abort()

    workers = [threading.Thread(target=add, args=(i, m)) for i, m in enumerate(members)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not failures, failures
    assert acked == [rounds] * len(members)
    assert conflicts, "the rivals never met"
    assert all(CONFLICT.search(message) for message in conflicts), [m for m in conflicts if not CONFLICT.search(m)]
    assert _same_everywhere(rs, members) == [[1, "counter", rounds * len(members)]]


# ---------------------------------------------------------------- a split set


def test_a_six_member_set_split_three_three_commits_on_neither_side(replicaset_factory) -> None:
    """Each side in turn runs while the other hangs: a QUORUM write needs 4 of 6, so on
    either side it fails at its deadline saying 3 of 6 prepared, while ONE writes go on
    locally. Once healed the members agree, with the ONE rows and no QUORUM row."""
    rs, members = quorum_set_of(replicaset_factory, 6)
    sides = (members[:3], members[3:])
    for side, other in (sides, sides[::-1]):
        k = 1 if side is sides[0] else 2
        with ExitStack() as hung:
            for member in other:
                hung.enter_context(member.paused())
            with side[0].client() as client:
                started = time.monotonic()
                with pytest.raises(ServerError) as refused:
                    client.execute("INSERT INTO kv(k, v) VALUES (?, 'quorum')", [k], options=QUORUM)
                elapsed = time.monotonic() - started
                client.execute("INSERT INTO kv(k, v) VALUES (?, 'one')", [10 + k])
            assert refused.value.code == ErrorCode.SYNC_QUORUM_TIMEOUT, refused.value
            # 3 of 6 at most (a loaded machine may see one of the side's votes come late): never 4
            assert re.search(r"\b[0-3] of 6 members prepared, 4 needed", refused.value.message), refused.value
            assert elapsed < SYNCHRO_TIMEOUT_S + ANSWER_MARGIN_S
            assert not [row for member in side for row in rows(member) if row[1] == "quorum"]
    assert _same_everywhere(rs, members) == [[11, "one", 0], [12, "one", 0]]
    assert _quorum_write(members[5], "INSERT INTO kv(k, v) VALUES (1, 'healed')")
    assert _same_everywhere(rs, members) == [[1, "healed", 0], [11, "one", 0], [12, "one", 0]]


# ---------------------------------------------------------------- bank transfers


ACCOUNTS = 10
OPENING_BALANCE = 1000


class _Bank:
    """Transfers through one member from one thread, each a stream transaction at QUORUM
    with its own log row; what each client heard, by transfer id."""

    def __init__(self, member: Server, worker: int, stop: threading.Event) -> None:
        self.member, self.worker, self.stop = member, worker, stop
        self.transfers: dict[str, tuple[int, int, int]] = {}  # id -> (src, dst, amount)
        self.acked: set[str] = set()
        self.unconfirmed: dict[str, str] = {}  # committed, said the server (error 78), not yet held by a quorum
        self.aborted: set[str] = set()  # refused: never committed
        self.unknown: set[str] = set()  # the connection went during COMMIT
        self.unexpected: list[BaseException] = []

    def run(self, attempts_max: int = 2000) -> None:
        rng = random.Random(self.worker)
        client: Client | None = None
        for n in range(attempts_max):
            if self.stop.is_set():
                break
            if client is None:
                try:
                    client = self.member.client(timeout_s=SYNCHRO_TIMEOUT_S + 3)
                except OSError:
                    time.sleep(0.05)
                    continue
            src, dst = rng.sample(range(1, ACCOUNTS + 1), 2)
            transfer_id = f"w{self.worker}-{n}"
            self.transfers[transfer_id] = (src, dst, rng.randint(1, 50))
            if not self._transfer(client, transfer_id, stream_id=n + 1):
                client.close()
                client = None
        if client is not None:
            client.close()

    def _transfer(self, client: Client, transfer_id: str, stream_id: int) -> bool:
        """One transfer; False when the connection is no longer usable."""
        src, dst, amount = self.transfers[transfer_id]
        committing = False
        try:
            client.call(RequestType.BEGIN, {Key.OPTIONS: QUORUM}, stream_id=stream_id)
            client.execute("UPDATE acct SET balance = balance - ? WHERE id = ?", [amount, src], stream_id=stream_id)
            client.execute("UPDATE acct SET balance = balance + ? WHERE id = ?", [amount, dst], stream_id=stream_id)
            client.execute("INSERT INTO xfer(id, src, dst, amount) VALUES (?, ?, ?, ?)",
                           [transfer_id, src, dst, amount], stream_id=stream_id)
            committing = True
            client.call(RequestType.COMMIT, {}, stream_id=stream_id)
        except ServerError as exc:
            if exc.code == ErrorCode.TIMEOUT:
                self.unconfirmed[transfer_id] = exc.message
            elif exc.code in (ErrorCode.TRANSACTION_CONFLICT, ErrorCode.SYNC_QUORUM_TIMEOUT, ErrorCode.QUORUM_WAIT,
                              ErrorCode.READONLY):
                self.aborted.add(transfer_id)
            else:
                self.unexpected.append(exc)
                self.aborted.add(transfer_id)
            return False  # a failed statement leaves the stream open: a new connection rolls it back
        except OSError:
            (self.unknown if committing else self.aborted).add(transfer_id)
            return False
        self.acked.add(transfer_id)
        return True


def _chaos(members: list[Server], rounds: int) -> list[str]:
    """Kill -9 and restart one member, then hang another for a second, `rounds` times;
    never more than one member down at once. Returns what it did."""
    done = []
    for round_ in range(rounds):
        victim, hung = members[round_ % 3], members[(round_ + 1) % 3]
        time.sleep(0.4)
        victim.kill()
        time.sleep(0.3)
        victim.start()
        done.append(f"killed and restarted {victim.data_dir.name}")
        time.sleep(0.4)
        with hung.paused():
            time.sleep(1.0)
        done.append(f"hung {hung.data_dir.name} for 1 s")
    return done


def test_bank_transfers_at_quorum_survive_kills_and_hangs(quorum_set) -> None:
    """Three clients, one per member, move money between ten accounts, each transfer one
    stream transaction at QUORUM with a log row keyed by the client's transfer id, while
    members are killed -9 and restarted, or hung. At the end every member holds the same
    rows, the total never changed, every transfer acknowledged (or said committed but not
    yet confirmed, error 78) is there, no refused one is, and each balance is its opening
    balance moved by exactly the transfers logged: none half done, none twice."""
    rs, members = quorum_set
    with members[0].client() as client:
        client.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)")
        client.execute("CREATE TABLE xfer(id TEXT PRIMARY KEY, src INTEGER, dst INTEGER, amount INTEGER)")
        for account in range(1, ACCOUNTS + 1):
            client.execute("INSERT INTO acct(id, balance) VALUES (?, ?)", [account, OPENING_BALANCE])
    rs.wait_converged()
    stop = threading.Event()
    banks = [_Bank(member, worker, stop) for worker, member in enumerate(members)]
    threads = [threading.Thread(target=bank.run) for bank in banks]
    for thread in threads:
        thread.start()
    try:
        chaos = _chaos(members, rounds=3)
    finally:
        stop.set()
        for thread in threads:
            thread.join(SYNCHRO_TIMEOUT_S + 10)
    assert not any(thread.is_alive() for thread in threads)
    assert not [exc for bank in banks for exc in bank.unexpected], [exc for bank in banks for exc in bank.unexpected]
    acked = set().union(*(bank.acked for bank in banks))
    committed = acked.union(*(bank.unconfirmed for bank in banks))
    aborted = set().union(*(bank.aborted for bank in banks))
    transfers = {tid: t for bank in banks for tid, t in bank.transfers.items()}
    unknown = set().union(*(bank.unknown for bank in banks))
    unconfirmed = {tid: message for bank in banks for tid, message in bank.unconfirmed.items()}
    heard = f"{len(acked)} acknowledged, {unconfirmed} unconfirmed, {len(aborted)} refused, " \
            f"{len(unknown)} unknown; {chaos}"
    assert len(acked) >= 20, f"too few transfers went through: {heard}"

    accounts = _same_everywhere(rs, members, "SELECT id, balance FROM acct ORDER BY id")
    logged = _same_everywhere(rs, members, "SELECT id, src, dst, amount FROM xfer ORDER BY id")
    assert sum(balance for _, balance in accounts) == ACCOUNTS * OPENING_BALANCE
    present = {tid: (src, dst, amount) for tid, src, dst, amount in logged}
    assert committed <= set(present), f"committed transfers lost: {sorted(committed - set(present))} ({heard})"
    assert not aborted & set(present), f"refused transfers applied: {sorted(aborted & set(present))}"
    assert all(transfers[tid] == t for tid, t in present.items())
    moved = {account: OPENING_BALANCE for account in range(1, ACCOUNTS + 1)}
    for src, dst, amount in present.values():
        moved[src] -= amount
        moved[dst] += amount
    assert accounts == [[account, balance] for account, balance in sorted(moved.items())], (accounts, moved)
    for member in members:
        assert not [e for e in member.log_events() if e.get("level") == "error"], member.log_path


# ---------------------------------------------------------------- stream transactions


def _ten_statements(client: Client, stream_id: int, base: int) -> None:
    """Marmot's shape: BEGIN at QUORUM, five INSERTs and five UPDATEs, COMMIT."""
    client.call(RequestType.BEGIN, {Key.OPTIONS: QUORUM}, stream_id=stream_id)
    for k in range(base, base + 5):
        client.execute("INSERT INTO kv(k, v) VALUES (?, 'stream')", [k], stream_id=stream_id)
    for k in range(base, base + 5):
        client.execute("UPDATE kv SET n = n + ? WHERE k = ?", [k, k], stream_id=stream_id)
    client.call(RequestType.COMMIT, {}, stream_id=stream_id)


def test_a_ten_statement_stream_transaction_is_all_or_nothing_everywhere(quorum_set) -> None:
    """Ten statements in one stream at QUORUM land on every member together; with two of
    three members down the COMMIT fails in bounded time and leaves nothing anywhere,
    and once they are back the same transaction commits."""
    rs, (first, second, third) = quorum_set
    expected = [[k, "stream", k] for k in range(1, 6)]
    with second.client() as client:
        _ten_statements(client, stream_id=1, base=1)
        assert client.execute("SELECT * FROM kv ORDER BY k").rows == expected
    assert _same_everywhere(rs, [first, second, third]) == expected

    first.kill()
    third.kill()
    with second.client() as client:
        started = time.monotonic()
        with pytest.raises(ServerError) as refused:
            _ten_statements(client, stream_id=2, base=6)
        assert time.monotonic() - started < SYNCHRO_TIMEOUT_S + ANSWER_MARGIN_S
        assert refused.value.code == ErrorCode.SYNC_QUORUM_TIMEOUT, refused.value
        assert "1 of 3 members prepared, 2 needed" in refused.value.message, refused.value
        assert client.execute("SELECT * FROM kv ORDER BY k").rows == expected
    first.start()
    third.start()
    assert _same_everywhere(rs, [first, second, third]) == expected
    with third.client() as client:
        _ten_statements(client, stream_id=3, base=6)
    assert _same_everywhere(rs, [first, second, third]) == expected + [[k, "stream", k] for k in range(6, 11)]


def test_a_write_waiting_for_its_quorum_commits_once_a_stopped_member_is_back(replicaset_factory) -> None:
    """Two of three members stopped: the write waits. The coordinator delivers its PREPARE
    again while it waits (a refused connection is not an answer), so the first member back
    within the timeout makes the quorum, and the write commits instead of timing out."""
    rs = replicaset_factory("replication.synchro_timeout_s = 20\n")
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    second, third = rs.join(first), rs.join(first)
    rs.wait_converged()
    assert second.stop() == 0 and third.stop() == 0
    outcome: list[object] = []

    def write() -> None:
        started = time.monotonic()
        try:
            with first.client(timeout_s=30) as client:
                client.execute("INSERT INTO kv(k, v) VALUES (1, 'waited')", options=QUORUM)
            outcome.append(time.monotonic() - started)
        except ServerError as exc:
            outcome.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)  # the PREPAREs went out and found nobody
    assert not outcome, outcome
    third.start()
    writer.join(30)
    assert outcome and isinstance(outcome[0], float), outcome
    assert outcome[0] < 15, "committed when member 3 came back, not at the deadline"
    assert rows(third, "SELECT v FROM kv WHERE k = 1") == [["waited"]]
