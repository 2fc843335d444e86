"""SQL result shapes and bind decoding; binds are checked against apsw itself."""

import apsw
import msgpack
import pytest
import tarantool
from tarantool.request import RequestExecute

from replicaset.iproto import (
    BIND_COUNT_MAX,
    ErrorCode,
    Key,
    RemoteProtocolError,
    decode_binds,
    metadata,
    sql_info,
    sql_type_name,
)


def connector_binds(params) -> object:
    """SQL_BIND exactly as the PyPI `tarantool` connector encodes `params`."""
    conn = tarantool.Connection("127.0.0.1", 1, connect_now=False)
    body = RequestExecute(conn, "SELECT 1", params)._body
    return msgpack.unpackb(body, raw=False, strict_map_key=False)[Key.SQL_BIND]


def test_metadata_and_sql_info_shapes() -> None:
    assert metadata([("ID", "integer"), ("V", "string")]) == [
        {0: "ID", 1: "integer"},
        {0: "V", 1: "string"},
    ]
    assert sql_info(3, [7, 8]) == {0: 3, 1: [7, 8]}
    assert sql_info(0, ()) == {0: 0}


@pytest.mark.parametrize(
    ("declared", "name"),
    [
        (None, "any"),
        ("", "any"),
        ("INTEGER", "integer"),
        ("bigint", "integer"),
        ("VARCHAR(10)", "string"),
        ("TEXT", "string"),
        ("BLOB", "varbinary"),
        ("REAL", "double"),
        ("DOUBLE PRECISION", "double"),
        ("BOOLEAN", "boolean"),
        ("NUMERIC", "number"),
        ("DECIMAL(10,2)", "number"),
    ],
)
def test_sql_type_name_follows_sqlite_affinity(declared, name) -> None:
    assert sql_type_name(declared) == name


def test_connector_positional_binds_run_in_apsw() -> None:
    binds = decode_binds(connector_binds([1, "two", None, b"\x03", 4.5, True]))
    assert binds == [1, "two", None, b"\x03", 4.5, True]
    row = apsw.Connection(":memory:").execute("SELECT ?, ?, ?, ?, ?, ?", binds).fetchone()
    assert row == (1, "two", None, b"\x03", 4.5, 1)


def test_connector_named_binds_run_in_apsw() -> None:
    wire = connector_binds({"a": 1, "b": "x"})
    assert wire == [{":a": 1}, {":b": "x"}]
    binds = decode_binds(wire)
    assert binds == {"a": 1, "b": "x"}
    row = apsw.Connection(":memory:").execute("SELECT :b, @a, $a", binds).fetchone()
    assert row == ("x", 1, 1)


def test_bind_name_prefixes_are_stripped() -> None:
    assert decode_binds([{"@x": 1}, {"$y": 2}, {"z": 3}]) == {"x": 1, "y": 2, "z": 3}
    assert decode_binds(None) == [] and decode_binds([]) == []


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ({":a": 1}, ErrorCode.INVALID_MSGPACK),  # not an array
        ("x", ErrorCode.INVALID_MSGPACK),
        ([{":a": 1, ":b": 2}], ErrorCode.INVALID_MSGPACK),
        ([{1: 1}], ErrorCode.INVALID_MSGPACK),
        ([{":": 1}], ErrorCode.ILLEGAL_PARAMS),
        ([{":a": 1}, {"@a": 2}], ErrorCode.ILLEGAL_PARAMS),
        ([1, {":a": 1}], ErrorCode.ILLEGAL_PARAMS),
        ([[1]], ErrorCode.SQL_BIND_TYPE),
        ([{":a": {"k": 1}}], ErrorCode.SQL_BIND_TYPE),
        ([msgpack.ExtType(2, b"\x00")], ErrorCode.SQL_BIND_TYPE),
        ([1 << 63], ErrorCode.SQL_BIND_TYPE),
        ([-(1 << 63) - 1], ErrorCode.SQL_BIND_TYPE),
        ([0] * (BIND_COUNT_MAX + 1), ErrorCode.SQL_BIND_PARAMETER_MAX),
    ],
)
def test_bad_binds_raise_non_fatal_errors(value, code) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_binds(value)
    assert not info.value.fatal
    assert info.value.code == code


def test_int64_edges_are_accepted() -> None:
    assert decode_binds([(1 << 63) - 1, -(1 << 63)]) == [(1 << 63) - 1, -(1 << 63)]
