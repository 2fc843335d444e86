"""Point-in-time restore (docs/restore.md): WALs made by real engines in-process, restored up to
a row, a time or a transaction; the result compared with the audit's replay; one real `serve
--read-only` of a copy at the end."""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from replicaset import cli
from replicaset.core.hlc import pack_stamp, unpack_stamp
from replicaset.identity import Identity
from replicaset.restore import (
    ReplayStopped,
    RestoreError,
    UntilLsn,
    UntilTime,
    UntilTxn,
    is_copy,
    parse_until_time,
    restore,
)
from replicaset.restore.bound import stamp_time
from replicaset.storage import Engine
from replicaset.storage.rows import CapturedRow, DmlPayload, Op
from tests.storage.enginekit import START_MS, FakeClock, close_all, open_engine, run, select, ship
from wal import Record, RecordType, Wal

KV_DDL = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)"


@pytest.fixture(autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    close_all()


def insert(engine: Engine, k: int, v: str) -> int:
    committed = run(engine, ("INSERT INTO kv VALUES (?, ?)", (k, v)))
    assert committed is not None
    return committed.txn_id


def copy_rows(target: Path) -> list[list[object]]:
    engine = open_engine(target, 31, FakeClock())
    try:
        return select(engine, "SELECT k, v FROM kv ORDER BY k")
    finally:
        close_all()


@dataclass
class Pair:
    """Two members, 1 and 2, writing in turn to one table and shipping to each other: `txns[i]`
    is the i-th commit after the DDL, of member 1 when i is even, of member 2 when odd."""

    a: Path
    b: Path
    txns: list[int]


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    clock = FakeClock()
    a, b = open_engine(tmp_path / "a", 1, clock), open_engine(tmp_path / "b", 2, clock)
    run(a, KV_DDL)
    ship(a, b)
    txns = []
    for i in range(5):
        txns.append(insert(a, 10 + i, f"a{i}"))  # 1:2+i
        txns.append(insert(b, 20 + i, f"b{i}"))  # 2:1+i
    ship(a, b)
    ship(b, a)
    close_all()
    return Pair(a=tmp_path / "a", b=tmp_path / "b", txns=txns)


# ---------------------------------------------------------------- stopping exactly at the bound


def test_until_lsn_stops_at_that_row_and_takes_every_row_committed_before_it(pair: Pair, tmp_path: Path) -> None:
    result = restore(pair.a, tmp_path / "copy", bound=UntilLsn(2, 3))
    # commit order: 1:1 (DDL), 1:2, 2:1, 1:3, 2:2, 1:4, 2:3 | 1:5, 2:4, 1:6, 2:5
    assert result.vclock == {1: 4, 2: 3}
    assert (result.applied, result.after_bound, result.failed) == (7, 4, ())
    assert copy_rows(tmp_path / "copy") == [[10, "a0"], [11, "a1"], [12, "a2"], [20, "b0"], [21, "b1"], [22, "b2"]]


def test_until_lsn_of_an_origin_stops_its_own_rows_there_too(pair: Pair, tmp_path: Path) -> None:
    result = restore(pair.b, tmp_path / "copy", bound=UntilLsn(1, 2))
    assert result.vclock == {1: 2}, "2:1 was committed after 1:2"
    assert copy_rows(tmp_path / "copy") == [[10, "a0"]]


def test_until_time_takes_the_rows_committed_in_that_millisecond_or_before(pair: Pair, tmp_path: Path) -> None:
    third = pair.txns[3]  # 2:2
    ms = unpack_stamp(third)[0]
    result = restore(pair.a, tmp_path / "at", bound=parse_until_time(stamp_time(third)))
    assert result.vclock == {1: 3, 2: 2}
    before = restore(pair.a, tmp_path / "before", bound=UntilTime(ms - 1))
    assert before.vclock == {1: 3, 2: 1}
    assert copy_rows(tmp_path / "before") == [[10, "a0"], [11, "a1"], [20, "b0"]]


def test_until_txn_includes_that_transaction_and_nothing_committed_after_it(pair: Pair, tmp_path: Path) -> None:
    result = restore(pair.b, tmp_path / "copy", bound=UntilTxn(pair.txns[6]))  # 1:5
    assert result.vclock == {1: 5, 2: 3}
    assert [k for k, _ in copy_rows(tmp_path / "copy")] == [10, 11, 12, 13, 20, 21, 22]


def test_a_time_in_another_zone_is_the_same_instant() -> None:
    assert parse_until_time("2023-11-14T23:13:20.007+01:00") == parse_until_time("2023-11-14T22:13:20.007Z")
    assert parse_until_time("2023-11-14T22:13:20.007Z").ms == START_MS + 7


# ---------------------------------------------------------------- several WALs, checkpoints


def test_two_members_wals_give_what_one_complete_wal_gives(tmp_path: Path) -> None:
    """Member 2's log lost its first segments to GC and never got member 1's last rows; member
    1 holds member 2's early rows: together they hold what member 3, which got every row, holds."""
    clock = FakeClock()
    a, b, c = (open_engine(tmp_path / name, i, clock, wal_max_size_bytes=1024) for i, name in enumerate("abc", 1))
    run(a, KV_DDL)
    ship(a, b)
    for i in range(30):
        insert(b, 100 + i, f"b{i}")
    ship(b, a)
    middle = 0
    for i in range(30):
        insert(a, i, f"a{i}")
        txn = insert(b, 200 + i, f"late{i}")
        middle = txn if i == 10 else middle
    ship(a, c)
    ship(b, c)
    insert(a, 999, "last")
    ship(a, c)
    close_all()
    # Member 2's log is 1:1 then its own rows, so a segment named s starts at 2:(s - 1).
    segments = sorted((tmp_path / "b" / "wal").glob("*.wal"))
    collected = [p for p, following in zip(segments, segments[1:]) if int(following.stem) - 1 <= 30]
    assert collected
    for segment in collected:
        segment.unlink()
    with pytest.raises(RestoreError, match="lack rows between the base"):
        restore(tmp_path / "b", tmp_path / "b-alone")

    merged = restore(tmp_path / "b", tmp_path / "merged", wals=[tmp_path / "a"])
    whole = restore(tmp_path / "c", tmp_path / "whole")
    assert merged.vclock == whole.vclock == {1: 32, 2: 60}
    assert merged.digest == whole.digest
    assert merged.applied == whole.applied == 92
    again = restore(tmp_path / "b", tmp_path / "again", wals=[tmp_path / "a", tmp_path / "c"])
    assert (again.digest, again.applied) == (whole.digest, 92)
    assert again.held >= 92, "every row of the third WAL is a copy, applied once"

    bound = UntilTxn(middle)
    partial = restore(tmp_path / "a", tmp_path / "m2", wals=[tmp_path / "b"], bound=bound)
    assert partial.vclock == {1: 12, 2: 41}
    assert partial.digest == restore(tmp_path / "c", tmp_path / "w2", bound=bound).digest


def test_a_data_directory_gives_its_newest_checkpoint_before_the_bound(tmp_path: Path) -> None:
    clock = FakeClock()
    a = open_engine(tmp_path / "a", 1, clock)
    run(a, KV_DDL)
    insert(a, 1, "one")
    first = a.checkpoint()
    insert(a, 2, "two")
    second = a.checkpoint()
    insert(a, 3, "three")
    close_all()
    latest = restore(tmp_path / "a", tmp_path / "latest")
    assert (latest.base, latest.base_vclock, latest.applied, latest.held) == (str(second), {1: 3}, 1, 3)
    middle = restore(tmp_path / "a", tmp_path / "middle", bound=UntilLsn(1, 2))
    assert (middle.base, middle.vclock) == (str(first), {1: 2})
    assert copy_rows(tmp_path / "middle") == [[1, "one"]]
    before = restore(tmp_path / "a", tmp_path / "before", bound=UntilLsn(1, 1))
    assert (before.base, before.vclock) == ("an empty database", {1: 1})


def test_a_checkpoint_file_takes_its_rows_from_the_wals_given(pair: Pair, tmp_path: Path) -> None:
    engine = open_engine(pair.a, 1, FakeClock())
    snap = engine.checkpoint()  # at {1: 6, 2: 5}
    close_all()
    result = restore(snap, tmp_path / "copy", wals=[pair.b])
    assert (result.base_vclock, result.vclock, result.applied) == ({1: 6, 2: 5}, {1: 6, 2: 5}, 0)
    with pytest.raises(RestoreError, match="already holds rows committed after the bound"):
        restore(snap, tmp_path / "past", wals=[pair.b], bound=UntilLsn(2, 2))


def test_wals_of_members_that_reused_an_lsn_are_refused(tmp_path: Path) -> None:
    one, other = open_engine(tmp_path / "one", 1, FakeClock()), open_engine(tmp_path / "other", 1, FakeClock())
    for engine, value in ((one, "x"), (other, "y")):
        run(engine, KV_DDL)
        insert(engine, 1, value)
    close_all()
    with pytest.raises(RestoreError, match="row 1:2 is txn .* diverged"):
        restore(tmp_path / "one", tmp_path / "copy", wals=[tmp_path / "other"])


# ---------------------------------------------------------------- the audit's replay


def test_the_copy_equals_the_audits_replay_of_a_member_stopped_at_that_point(pair: Pair, tmp_path: Path) -> None:
    """Member 1 is copied aside (a member whose final tables are the state at that point), with
    a checkpoint, then goes on: restore of its later WAL up to that point gives the digest the
    audit's replay of the copy checks `db.sqlite` against."""
    pytest.importorskip("pyspark")  # replicaset.audit imports its data source
    from replicaset.audit.inputs import discover
    from replicaset.audit.replay import replay_member
    from replicaset.audit.run import _replay_specs

    clock = FakeClock(start_ms=START_MS + 1000)
    a, b = open_engine(pair.a, 1, clock), open_engine(pair.b, 2, clock)
    insert(a, 50, "c")
    a.checkpoint()
    last = insert(b, 60, "d")
    ship(b, a)
    stopped = a.vclock.to_dict()
    close_all()
    shutil.copytree(pair.a, tmp_path / "stopped")
    a = open_engine(pair.a, 1, clock)
    insert(a, 70, "after")
    close_all()

    restored = restore(pair.a, tmp_path / "copy", bound=UntilTxn(last))
    members = discover([tmp_path / "stopped"])
    (replay,) = [replay_member(spec) for spec in _replay_specs(members, {members[0].name: stopped})]
    assert replay["ok"], replay["detail"]
    assert replay["base"].endswith(".snap") and restored.base.endswith(".snap")
    assert restored.vclock == replay["final_vclock"] == stopped
    assert {t: f"{d:016x}" for t, d in restored.digest.items()} == replay["digest"]


# ---------------------------------------------------------------- rows that cannot be applied


def bad_rows(wal_dir: Path) -> None:
    """Origin 5: a row of a table nobody has, a row whose payload is not msgpack, a good row."""
    stamp = pack_stamp(START_MS + 500, 5, 0)

    def dml(n: int, table: str, k: int) -> Record:
        row = CapturedRow(table=table, op=Op.INSERT, key=f"{table}:{k}", new={"k": k, "v": "five"})
        payload = DmlPayload(hlc=stamp + n, schema_id=(1, 1), rows=[row]).pack()
        return Record(type=RecordType.DML, origin=5, lsn=n, txn_id=stamp + n, payload=payload)

    garbage = Record(type=RecordType.DML, origin=5, lsn=2, txn_id=stamp + 2, payload=b"\xc1 not msgpack")
    with Wal.open(wal_dir) as wal:
        wal.append([dml(1, "ghost", 1), garbage, dml(3, "kv", 55)])


def test_a_row_that_cannot_be_applied_stops_the_replay_with_its_reason(pair: Pair, tmp_path: Path) -> None:
    bad_rows(tmp_path / "five")
    with pytest.raises(ReplayStopped, match=r"replay stopped at row 5:1 \(txn \d+\).*ghost") as stopped:
        restore(pair.a, tmp_path / "copy", wals=[tmp_path / "five"])
    assert (stopped.value.origin, stopped.value.lsn) == (5, 1)
    assert not (tmp_path / "copy").exists(), "no half copy is left behind"


def test_skip_failed_names_the_rows_it_skips_and_goes_on(pair: Pair, tmp_path: Path) -> None:
    bad_rows(tmp_path / "five")
    result = restore(pair.a, tmp_path / "copy", wals=[tmp_path / "five"], skip_failed=True)
    assert [(f.origin, f.lsn) for f in result.failed] == [(5, 1), (5, 2)]
    assert "ghost" in result.failed[0].reason and "payload" in result.failed[1].reason
    assert result.vclock == {1: 6, 2: 5, 5: 3}
    assert [55, "five"] in copy_rows(tmp_path / "copy")
    assert "skipped 5:1 (txn" in result.summary()


# ---------------------------------------------------------------- damaged WALs


def test_a_torn_tail_ends_the_log_as_recovery_cuts_it(pair: Pair, tmp_path: Path) -> None:
    segment = sorted((pair.a / "wal").glob("*.wal"))[-1]
    size = segment.stat().st_size
    os.truncate(segment, size - 3)  # the last row, 2:5, is torn
    result = restore(pair.a, tmp_path / "copy")
    assert result.vclock == {1: 6, 2: 4}
    assert any("torn record" in w for w in result.warnings)
    assert segment.stat().st_size == size - 3, "restore only reads its sources"


def test_a_corrupt_record_followed_by_valid_ones_is_refused(pair: Pair, tmp_path: Path) -> None:
    segment = sorted((pair.a / "wal").glob("*.wal"))[-1]
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(RestoreError, match="cannot read the WAL .* corrupt at offset"):
        restore(pair.a, tmp_path / "copy")


# ---------------------------------------------------------------- arguments, through the CLI


def cli_main(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["restore", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("extra", "code", "message"), [
    (["--until-lsn", "2-3"], 2, "--until-lsn '2-3' is not ORIGIN:LSN"),
    (["--until-lsn", "40:3"], 2, "origin 40 is outside 0..31"),
    (["--until-time", "2023-11-14T22:13:20"], 2, "has no UTC offset"),
    (["--until-txn", "tomorrow"], 2, "is not a txn id"),
    (["--until-lsn", "2:99"], 1, "row 2:99 is in no WAL given (the WALs given hold origin 2 from 2:1 to 2:5)"),
    (["--until-txn", "12345"], 1, "no row of the WALs given belongs to txn 12345"),
    (["--until-time", "2030-01-01T00:00:00Z"], 1, "no row of the WALs given was committed after 2030-01-01T00:00:00.000Z"),
    (["--wal", "/nonexistent"], 2, "--wal /nonexistent is neither a data directory"),
])
def test_bad_arguments_give_clear_errors(pair: Pair, tmp_path: Path, extra: list[str], code: int, message: str) -> None:
    status, out, err = cli_main("--from", str(pair.a), "--to", str(tmp_path / "copy"), *extra)
    assert (status, out) == (code, "")
    assert err.startswith("replicaset restore: ") and message in err, err
    assert not (tmp_path / "copy").exists()


def test_new_dir_must_be_new_or_empty(pair: Pair, tmp_path: Path) -> None:
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "keep.txt").write_text("mine")
    status, _, err = cli_main("--from", str(pair.a), "--to", str(tmp_path / "copy"))
    assert status == 2 and "exists and is not an empty directory" in err
    assert os.listdir(tmp_path / "copy") == ["keep.txt"]
    (tmp_path / "copy" / "keep.txt").unlink()
    status, out, _ = cli_main("--from", str(pair.a), "--to", str(tmp_path / "copy"), "--until-lsn", "1:3")
    assert status == 0 and "vclock reached: {1: 3, 2: 1}" in out


def test_the_cli_refuses_a_source_that_is_neither_kind(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    status, _, err = cli_main("--from", str(tmp_path / "notes.txt"), "--to", str(tmp_path / "copy"))
    assert status == 2 and "is not a checkpoint" in err
    status, _, err = cli_main("--from", str(tmp_path), "--to", str(tmp_path / "copy"))
    assert status == 2 and "neither a data directory (with wal/) nor a checkpoint file" in err


# ---------------------------------------------------------------- the copy's identity, served


def add_cluster(engine: Engine, members: list[tuple[int, str]]) -> None:
    """A `_cluster` as a real set's, naming members at their addresses."""
    for sql, binds in [("CREATE TABLE _cluster(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, "
                        "address TEXT NOT NULL)", ())] + [
            ("INSERT INTO _cluster VALUES (?, ?, ?)", (i, f"00000000-0000-4000-8000-{i:012d}", address))
            for i, address in members]:
        txn = engine.begin()
        engine.execute(txn, sql, binds, trusted=True)
        engine.commit(txn)
        engine.flush()


def test_the_copy_is_a_set_of_its_own_with_an_id_no_origin_or_member_has(pair: Pair, tmp_path: Path) -> None:
    add_cluster(open_engine(pair.a, 1, FakeClock(start_ms=START_MS + 2000)),
                [(1, "127.0.0.1:1"), (2, "127.0.0.1:2"), (31, "127.0.0.1:31")])
    close_all()
    result = restore(pair.a, tmp_path / "copy")
    identity = Identity.load(tmp_path / "copy")
    assert identity == result.identity
    assert identity.instance_id == 30
    assert is_copy(tmp_path / "copy") and not is_copy(pair.a)
    assert "read_only = true" in (tmp_path / "copy" / "config.toml").read_text()


def test_serve_read_only_answers_reads_refuses_writes_and_follows_no_member(tmp_path: Path) -> None:
    from replicaset.iproto.client import Client
    from replicaset.iproto.constants import ErrorCode
    from replicaset.iproto.errors import ServerError
    from replicaset.testing.processes import start_instance, stop_instance

    with socket.socket() as member:  # a member of the original set, listed in the copy's _cluster
        member.bind(("127.0.0.1", 0))
        member.listen()
        member.settimeout(1.0)
        source = open_engine(tmp_path / "source", 1, FakeClock())
        add_cluster(source, [(1, "127.0.0.1:%d" % member.getsockname()[1])])  # 1:1, 1:2
        run(source, KV_DDL)  # 1:3
        for k, v in ((1, "one"), (2, "two"), (3, "three")):  # 1:4 .. 1:6
            insert(source, k, v)
        close_all()
        done = subprocess.run([sys.executable, "-m", "replicaset.cli", "restore", "--from", str(tmp_path / "source"),
                               "--to", str(tmp_path / "copy"), "--until-lsn", "1:5"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "vclock reached: {1: 5}" in done.stdout and "replaying 5 rows" in done.stderr
        proc, port = start_instance(["serve", "--data-dir", str(tmp_path / "copy"), "--read-only"],
                                    tmp_path / "serve.log")
        try:
            with Client.connect("127.0.0.1", port) as client:
                assert client.execute("SELECT k, v FROM kv ORDER BY k").rows == [[1, "one"], [2, "two"]]
                with pytest.raises(ServerError) as refused:
                    client.execute("INSERT INTO kv VALUES (99, 'no')")
                assert refused.value.code == ErrorCode.READONLY
                (info,) = client.eval("box.info")
                assert info["ro"] is True and info["id"] == 31 and info["vclock"] == {1: 5}
            with pytest.raises(TimeoutError):
                member.accept()
        finally:
            stop_instance(proc)
