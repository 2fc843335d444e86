"""A session's prepared statements: ids, the bounds, unprepare, and the errors a client gets."""

import pytest
import xxhash

from replicaset.iproto import (
    STATEMENTS_PER_SESSION_MAX,
    ErrorCode,
    PreparedStatements,
    RemoteProtocolError,
    bind_metadata,
    statement_id,
)

# Two texts of one xxHash32, found by a search over "SELECT <n>".
COLLIDING = ("SELECT 37134", "SELECT 114515")


def test_the_id_is_the_xxhash32_of_the_text_and_the_same_text_keeps_it() -> None:
    prepared = PreparedStatements()
    sql = "SELECT * FROM t WHERE id = ?"
    stmt_id = prepared.prepare(sql)
    assert stmt_id == statement_id(sql) == xxhash.xxh32_intdigest(sql.encode())
    assert prepared.prepare(sql) == stmt_id
    assert len(prepared) == 1, "a text prepared twice is held once"
    assert prepared.text(stmt_id) == sql
    prepared.check_invariants()


def test_texts_of_one_hash_get_different_ids() -> None:
    first, second = COLLIDING
    assert statement_id(first) == statement_id(second)
    prepared = PreparedStatements()
    first_id, second_id = prepared.prepare(first), prepared.prepare(second)
    assert second_id == (first_id + 1) % (1 << 32)
    assert (prepared.text(first_id), prepared.text(second_id)) == COLLIDING
    prepared.unprepare(first_id)
    assert prepared.prepare(second) == second_id, "a text keeps its id while it is held"
    prepared.check_invariants()


def test_unprepare_drops_the_statement_and_an_unknown_id_is_wrong_query_id() -> None:
    prepared = PreparedStatements()
    stmt_id = prepared.prepare("SELECT 1")
    prepared.unprepare(stmt_id)
    assert len(prepared) == 0
    for call in (prepared.text, prepared.unprepare):
        with pytest.raises(RemoteProtocolError) as exc:
            call(stmt_id)
        assert exc.value.code == ErrorCode.WRONG_QUERY_ID == 211
        assert exc.value.message == f"Prepared statement with id {stmt_id} does not exist"
        assert not exc.value.fatal
    with pytest.raises(RemoteProtocolError) as never:
        prepared.text(12345)
    assert never.value.code == ErrorCode.WRONG_QUERY_ID
    prepared.check_invariants()


@pytest.mark.parametrize("bad", [-1, "1", 1.0, True, None, [1]])
def test_an_id_that_is_not_an_unsigned_integer_is_illegal(bad: object) -> None:
    prepared = PreparedStatements()
    with pytest.raises(RemoteProtocolError) as exc:
        prepared.text(bad)
    assert exc.value.code == ErrorCode.ILLEGAL_PARAMS


def test_past_the_statement_bound_prepare_is_refused_until_an_unprepare() -> None:
    assert STATEMENTS_PER_SESSION_MAX == 1024
    prepared = PreparedStatements(statements_max=3)
    ids = [prepared.prepare(f"SELECT {n}") for n in range(3)]
    with pytest.raises(RemoteProtocolError) as exc:
        prepared.prepare("SELECT 3")
    assert exc.value.code == ErrorCode.SQL_PREPARE
    assert "(3)" in exc.value.message and "unprepare" in exc.value.message
    assert prepared.prepare("SELECT 1") == ids[1], "a text already held is answered at the bound"
    assert len(prepared) == 3
    prepared.unprepare(ids[0])
    assert prepared.text(prepared.prepare("SELECT 3")) == "SELECT 3"
    prepared.check_invariants()


def test_past_the_text_byte_bound_prepare_is_refused() -> None:
    prepared = PreparedStatements(text_bytes_max=20)
    kept = prepared.prepare("SELECT 'é'")  # 11 bytes of UTF-8, 10 characters
    with pytest.raises(RemoteProtocolError) as exc:
        prepared.prepare("SELECT 12345")
    assert exc.value.code == ErrorCode.SQL_PREPARE
    assert "23 bytes" in exc.value.message and "20" in exc.value.message
    prepared.check_invariants()
    prepared.unprepare(kept)
    prepared.prepare("SELECT 12345")
    prepared.check_invariants()


def test_bind_metadata_types_every_parameter_any() -> None:
    assert bind_metadata(["?", ":name", "?3"]) == [
        {0: "?", 1: "ANY"},
        {0: ":name", 1: "ANY"},
        {0: "?3", 1: "ANY"},
    ]
    assert bind_metadata([]) == []
