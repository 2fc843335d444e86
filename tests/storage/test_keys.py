"""Intent keys: one text key per row, the same on every member, distinct for distinct rows."""

from pathlib import Path

import pytest

from replicaset.storage import SqlError
from hypothesis import given, settings
from hypothesis import strategies as st

from replicaset.storage.keys import NULL_SENTINEL, intent_key
from tests.storage.enginekit import FakeClock, b64, changes, dml_records, open_engine, run


def test_single_integer_key_is_the_number() -> None:
    assert intent_key("users", ["id"], [42]) == "users:42"
    assert intent_key("users", ["id"], [-7]) == "users:-7"
    assert intent_key("users", ["id"], [2**63 - 1]) == f"users:{2**63 - 1}"


def test_single_text_key_is_base64_msgpack() -> None:
    assert intent_key("users", ["name"], ["ann"]) == "users:b64:" + b64("ann")
    assert intent_key("users", ["name"], ["ann"]) == "users:b64:o2Fubg=="


def test_single_blob_key_keeps_its_bytes() -> None:
    assert intent_key("files", ["digest"], [b"\x00\xff"]) == "files:b64:" + b64(b"\x00\xff")
    assert intent_key("files", ["digest"], [b"\x00\xff"]) != intent_key("files", ["digest"], ["\x00\xff"])


def test_single_real_key_differs_from_the_integer() -> None:
    assert intent_key("m", ["x"], [5.0]) == "m:b64:" + b64(5.0)
    assert intent_key("m", ["x"], [5.0]) != intent_key("m", ["x"], [5])
    assert intent_key("m", ["x"], [0.5]) != intent_key("m", ["x"], [-0.5])


def test_null_key_is_the_sentinel() -> None:
    assert intent_key("t", ["k"], [None]) == f"t:{NULL_SENTINEL}"
    assert NULL_SENTINEL == "\x00NULL\x00"
    assert intent_key("t", ["k"], [None]) not in {
        intent_key("t", ["k"], ["NULL"]),
        intent_key("t", ["k"], [0]),
        intent_key("t", ["k"], [""]),
    }


def test_integer_5_and_text_5_are_different_keys() -> None:
    assert intent_key("t", ["k"], [5]) == "t:5"
    assert intent_key("t", ["k"], ["5"]) == "t:b64:" + b64("5")
    assert intent_key("t", ["k"], [5]) != intent_key("t", ["k"], ["5"])


def test_composite_key_sorts_columns_by_name() -> None:
    expected = "orders:c:" + b64(2) + ":" + b64("eu")
    # "customer" < "region", whatever order the primary key declares them in
    assert intent_key("orders", ["customer", "region"], [2, "eu"]) == expected
    assert intent_key("orders", ["region", "customer"], ["eu", 2]) == expected


def test_composite_key_keeps_value_types_and_nulls() -> None:
    keys = {
        intent_key("t", ["a", "b"], [1, "x"]),
        intent_key("t", ["a", "b"], ["1", "x"]),
        intent_key("t", ["a", "b"], [1.0, "x"]),
        intent_key("t", ["a", "b"], [None, "x"]),
        intent_key("t", ["a", "b"], [1, b"x"]),
    }
    assert len(keys) == 5
    assert intent_key("t", ["a", "b"], [None, "x"]) == "t:c:" + b64(None) + ":" + b64("x")


def test_a_value_containing_colons_cannot_fake_a_composite_key() -> None:
    single = intent_key("t", ["a"], [f"{b64(1)}:{b64(2)}"])
    composite = intent_key("t", ["a", "b"], [1, 2])
    assert single != composite


key_values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(a=key_values, b=key_values)
def test_distinct_single_values_give_distinct_keys(a: object, b: object) -> None:
    same = type(a) is type(b) and a == b and str(a) == str(b)  # 0.0 == -0.0 but prints apart
    assert (intent_key("t", ["k"], [a]) == intent_key("t", ["k"], [b])) == same


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from("abcdefg"), key_values), min_size=2, max_size=4, unique_by=lambda p: p[0]), data=st.data())
def test_composite_key_does_not_depend_on_column_order(pairs: list, data: st.DataObject) -> None:
    shuffled = data.draw(st.permutations(pairs))
    assert intent_key("t", [c for c, _ in pairs], [v for _, v in pairs]) == intent_key(
        "t", [c for c, _ in shuffled], [v for _, v in shuffled]
    )


# ------------------------------------------------------------------ keys the engine captures


@pytest.mark.parametrize(
    ("create", "insert", "expected_key"),
    [
        ("CREATE TABLE t(id INTEGER PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", [5]), "t:5"),
        ("CREATE TABLE t(k TEXT PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", ["a"]), "t:b64:" + b64("a")),
        # a TEXT column stores the integer 5 as '5': the key follows the stored value
        ("CREATE TABLE t(k TEXT PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", [5]), "t:b64:" + b64("5")),
        ("CREATE TABLE t(k BLOB PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", [b"\x01\x02"]), "t:b64:" + b64(b"\x01\x02")),
        ("CREATE TABLE t(k REAL PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", [2.5]), "t:b64:" + b64(2.5)),
        ("CREATE TABLE t(k REAL PRIMARY KEY, v)", ("INSERT INTO t VALUES (?, 'x')", [2]), "t:b64:" + b64(2.0)),
        (
            "CREATE TABLE t(z INTEGER, a TEXT, v, PRIMARY KEY (z, a))",
            ("INSERT INTO t VALUES (?, ?, 'x')", [9, "q"]),
            "t:c:" + b64("q") + ":" + b64(9),
        ),
        (
            "CREATE TABLE t(a TEXT, z INTEGER, v, PRIMARY KEY (z, a)) WITHOUT ROWID",
            ("INSERT INTO t VALUES (?, ?, 'x')", ["q", 9]),
            "t:c:" + b64("q") + ":" + b64(9),
        ),
    ],
    ids=["integer", "text", "text-affinity", "blob", "real", "real-affinity", "composite", "composite-without-rowid"],
)
def test_engine_captures_the_intent_key_of_the_stored_row(
    tmp_path: Path, create: str, insert: tuple[str, list], expected_key: str
) -> None:
    engine = open_engine(tmp_path, 1, FakeClock())
    run(engine, create)
    committed = run(engine, insert)
    assert committed is not None
    [(table, op, key, _, _)] = changes(committed.records[0])
    assert (table, op, key) == ("t", "INSERT", expected_key)


def test_a_null_key_value_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    """SQLite lets a non-rowid key hold NULL, and NULL never equals NULL, so such rows could
    not be found again on another member: the engine refuses them."""
    engine = open_engine(tmp_path, 1, FakeClock())
    run(engine, "CREATE TABLE t(k TEXT PRIMARY KEY, v)")
    with pytest.raises(SqlError, match="NULL primary-key value"):
        run(engine, ("INSERT INTO t VALUES (?, 'x')", [None]))
    assert engine.query("SELECT count(*) FROM t").rows == [[0]]


def test_integer_5_and_text_5_are_two_rows_with_two_versions(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, 1, FakeClock())
    run(engine, "CREATE TABLE t(k PRIMARY KEY, v)")  # no affinity: 5 and '5' are distinct values
    run(engine, ("INSERT INTO t VALUES (?, 'int')", [5]))
    run(engine, ("INSERT INTO t VALUES (?, 'text')", ["5"]))
    keys = [changes(r)[0][2] for r in dml_records(engine)]
    assert keys == ["t:5", "t:b64:" + b64("5")]
    assert {k for (k,) in engine.query("SELECT key FROM _rs_version WHERE tbl = 't'").rows} == set(keys)
