"""The reference model of last-writer-wins (`replicaset.testing.lww`): pinned answers of its
own, the engine agreeing with them, and its independence from the engine's apply code."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import replicaset.testing.lww as lww_module
from replicaset.storage.rows import CapturedRow, DmlPayload, Op
from replicaset.testing import lww
from tests.storage.enginekit import FakeClock, close_all, open_engine, run, ship, wal_records
from wal import Record, RecordType

KV = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, u INTEGER UNIQUE, n INTEGER NOT NULL DEFAULT 7)"


@pytest.fixture(autouse=True)
def _close_engines() -> Iterator[None]:
    yield
    close_all()


def test_the_model_imports_nothing_of_the_engine() -> None:
    tree = ast.parse(Path(lww_module.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m.startswith(("replicaset", "apsw", "wal"))}, imported


# Stamps of the rows below count from here: above the stamp of the CREATE TABLE row.
LATER = 1 << 63


def dml(origin: int, lsn: int, stamp: int, *rows: CapturedRow) -> Record:
    payload = DmlPayload(hlc=LATER + stamp, schema_id=(1, 1), rows=list(rows)).pack()
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=LATER + stamp, payload=payload)


def put(key: int, v: str, u: int | None = None) -> CapturedRow:
    return CapturedRow(table="kv", op=Op.INSERT, key=f"kv:{key}", new={"k": key, "v": v, "u": u, "n": 7})


def delete(key: int) -> CapturedRow:
    return CapturedRow(table="kv", op=Op.DELETE, key=f"kv:{key}", old={"k": key, "v": "?", "u": None, "n": 7})


@pytest.fixture
def schema(tmp_path: Path) -> Record:
    origin = open_engine(tmp_path / "origin", 1, FakeClock())
    committed = run(origin, KV)
    assert committed is not None
    return committed.records[0]


def observed(tmp_path: Path, name: str, records: list[Record]) -> lww.State:
    """What an engine that applied `records` in this order holds."""
    engine = open_engine(tmp_path / name, 9, FakeClock())
    for record in records:
        assert engine.apply(record)
    engine.flush()
    return lww.engine_state(engine)


def test_the_newer_stamp_wins_and_a_tie_goes_to_the_higher_origin(tmp_path: Path, schema: Record) -> None:
    rows = [
        dml(2, 1, 1000, put(1, "older")),
        dml(3, 1, 2000, put(1, "newer")),
        dml(2, 2, 3000, put(2, "from 2")),
        dml(3, 2, 3000, put(2, "from 3")),  # one stamp on two origins: (hlc, origin) decides
        dml(3, 3, 4000, delete(3)),
        dml(2, 3, 3500, put(3, "deleted later")),
    ]
    expected = lww.Model().add_all([schema, *rows]).state()
    assert expected["kv"].rows == {
        (1,): {"k": 1, "v": "newer", "u": None, "n": 7},
        (2,): {"k": 2, "v": "from 3", "u": None, "n": 7},
    }
    assert expected["kv"].versions == {
        "kv:1": (LATER + 2000, 3, False), "kv:2": (LATER + 3000, 3, False), "kv:3": (LATER + 4000, 3, True),
    }
    for n, order in enumerate([rows, sorted(rows, key=lambda r: -r.origin)]):  # each origin in LSN order
        assert lww.differences(expected, observed(tmp_path, f"o{n}", [schema, *order])) == []


def test_a_unique_loser_waits_latent_and_comes_back_when_its_value_is_free(tmp_path: Path, schema: Record) -> None:
    first = dml(2, 1, 1000, put(1, "a", u=5))
    rival = dml(3, 1, 2000, put(2, "b", u=5))
    moved = dml(3, 2, 3000, put(2, "b", u=6))
    model = lww.Model().add_all([schema, first, rival])
    state = model.state()["kv"]
    assert state.rows == {(2,): {"k": 2, "v": "b", "u": 5, "n": 7}}
    assert state.latent == {"kv:1": {"k": 1, "v": "a", "u": 5, "n": 7}}
    assert state.versions["kv:1"] == (LATER + 1000, 2, False), "a loser is no tombstone"
    model.add(moved)
    expected = model.state()
    assert set(expected["kv"].rows) == {(1,), (2,)} and expected["kv"].latent == {}
    for n, order in enumerate(itertools.permutations([first, rival])):
        assert lww.differences(expected, observed(tmp_path, f"o{n}", [schema, *order, moved])) == []


def test_two_changes_of_one_key_in_one_transaction_leave_the_last(tmp_path: Path) -> None:
    origin = open_engine(tmp_path / "origin", 1, FakeClock())
    run(origin, KV)
    run(origin, "INSERT INTO kv(k, v) VALUES (1, 'a')", "UPDATE kv SET v = 'b' WHERE k = 1")
    model = lww.Model().add_all(wal_records(origin))
    assert model.state()["kv"].rows == {(1,): {"k": 1, "v": "b", "u": None, "n": 7}}
    assert lww.differences(model.state(), lww.engine_state(origin)) == []


def test_nocase_values_collide_and_defaults_fill_missing_columns(tmp_path: Path) -> None:
    a, b = open_engine(tmp_path / "a", 1, FakeClock()), open_engine(tmp_path / "b", 2, FakeClock(step_ms=5))
    run(a, "CREATE TABLE acct(id INTEGER PRIMARY KEY, email TEXT COLLATE NOCASE UNIQUE, n INTEGER DEFAULT 3)")
    ship(a, b)
    run(a, "INSERT INTO acct(id, email) VALUES (1, 'Ann@x')")
    run(b, "INSERT INTO acct(id, email) VALUES (2, 'ann@X')")
    ship(a, b), ship(b, a)
    model = lww.Model().add_all(r for e in (a, b) for r in wal_records(e) if r.origin == e.instance_id)
    state = model.state()["acct"]
    assert len(state.rows) == 1 and len(state.latent) == 1
    for engine in (a, b):
        assert lww.differences(model.state(), lww.engine_state(engine)) == []
    schema = model.schemas()["acct"][0]
    assert schema.defaults == {"n": 3} and (("email", "NOCASE"),) in schema.groups


def test_one_lsn_with_two_payloads_is_refused(schema: Record) -> None:
    model = lww.Model().add_all([schema, dml(2, 1, 1000, put(1, "a"))])
    model.add(dml(2, 1, 1000, put(1, "a")))  # a copy: nothing new
    with pytest.raises(lww.ModelError, match="2:1 is given with two different payloads"):
        model.add(dml(2, 1, 1000, put(1, "b")))


def test_differences_name_the_row_the_version_and_the_latent_image() -> None:
    want = {"kv": lww.TableState(rows={(1,): {"k": 1, "v": "a"}}, versions={"kv:1": (5, 1, False)},
                                 latent={"kv:2": {"k": 2}})}
    have = {"kv": lww.TableState(rows={(1,): {"k": 1, "v": "b"}}, versions={"kv:1": (5, 2, False)}),
            "extra": lww.TableState()}
    assert lww.differences(want, have) == [
        "table extra should not exist",
        "kv: row (1,): expected {'k': 1, 'v': 'a'}, held {'k': 1, 'v': 'b'}",
        "kv: version of 'kv:1': expected (5, 1, False), held (5, 2, False)",
        "kv: latent image of 'kv:2': expected {'k': 2}, held None",
    ]
