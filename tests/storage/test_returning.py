"""RETURNING on the writer answers what SQLite answers: each statement runs on an engine and
on a plain apsw connection with the same schema, and the answers must be equal once the
keys the engine assigned (its own ids, docs/design/README.md §4.1) are mapped to those SQLite chose; the
assigned keys are the ones SQL_INFO reports, and rows are counted as SQLite counts them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from replicaset.storage import Engine, SqlError
from replicaset.storage.auto_ids import AUTO_ID_NODE_BITS
from replicaset.storage.transactions import StatementResult
from tests.storage.enginekit import FakeClock, changes, dml_records, open_engine, run, select, ship

INSTANCE_ID = 3
SCHEMA = (
    "CREATE TABLE st(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, n INTEGER DEFAULT 0,"
    " tag TEXT COLLATE NOCASE, g INTEGER GENERATED ALWAYS AS (n * 10) STORED)"
)


class Twin:
    """An engine and a plain SQLite connection that get the same statements. Rows are told
    apart by `unique`, a column whose values the tests keep distinct: the rows holding the
    same value in both are the same row, whatever their keys."""

    def __init__(self, engine: Engine, *schema: str, table: str = "st", unique: str = "name") -> None:
        self.engine = engine
        self.plain = apsw.Connection(":memory:")
        self.table, self.unique = table, unique
        self.keys: dict[int, int] = {}  # engine key -> SQLite's key of the same row
        for sql in schema:
            run(engine, sql)
            self.plain.execute(sql)

    def run(self, sql: str, binds: Any = ()) -> tuple[StatementResult, list[list[Any]]]:
        """Run `sql` on both; the engine's answer, and SQLite's rows. Row counts and column
        names must agree, and so must the tables afterwards."""
        txn = self.engine.begin()
        result = self.engine.execute(txn, sql, binds)
        self.engine.commit(txn)
        self.engine.flush()
        cursor = self.plain.cursor()
        names: list[str] = []

        def trace(cur: apsw.Cursor, _sql: str, _binds: Any) -> bool:
            names[:] = [d[0] for d in cur.description]
            return True

        cursor.exec_trace = trace
        plain_rows = [list(row) for row in cursor.execute(sql, binds)]
        assert [name for name, _ in result.columns] == names
        assert result.row_count == self.plain.changes()
        self._learn_keys()
        return result, plain_rows

    def fails(self, sql: str) -> SqlError:
        """`sql` fails on both with the same message and changes nothing on the engine."""
        before = select(self.engine, f"SELECT * FROM {self.table} ORDER BY 1")
        records = len(dml_records(self.engine))
        with pytest.raises(apsw.Error) as plain_error:
            self.plain.execute(sql).fetchall()
        txn = self.engine.begin()
        with pytest.raises(SqlError) as error:
            self.engine.execute(txn, sql)
        assert self.engine.commit(txn) is None
        self.engine.flush()
        assert str(error.value) in str(plain_error.value)
        assert select(self.engine, f"SELECT * FROM {self.table} ORDER BY 1") == before
        assert len(dml_records(self.engine)) == records
        return error.value

    def _learn_keys(self) -> None:
        query = f"SELECT {self.unique}, rowid FROM {self.table}"
        theirs = dict(self.plain.execute(query).fetchall())
        mine = dict(select(self.engine, query))
        assert mine.keys() == theirs.keys(), "both hold the same rows"
        self.keys.update({key: theirs[value] for value, key in mine.items()})
        table_query = f"SELECT * FROM {self.table} ORDER BY {self.unique}"
        assert self.mapped(select(self.engine, table_query), 0) == [
            list(r) for r in self.plain.execute(table_query)
        ]

    def mapped(self, rows: list[list[Any]], *key_columns: int) -> list[list[Any]]:
        """`rows` of the engine with the keys in `key_columns` replaced by SQLite's."""
        return [[self.keys[v] if i in key_columns else v for i, v in enumerate(row)] for row in rows]


def ours(key: int) -> bool:
    """A key of this member's residue, above SQLite's first choices."""
    return key % (1 << AUTO_ID_NODE_BITS) == INSTANCE_ID and key > 1 << AUTO_ID_NODE_BITS


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return open_engine(tmp_path / "e", INSTANCE_ID, FakeClock())


@pytest.fixture
def twin(engine: Engine) -> Twin:
    return Twin(engine, SCHEMA)


def test_an_insert_returns_the_key_it_was_given(twin: Twin) -> None:
    result, plain = twin.run("INSERT INTO st(name, n) VALUES ('ann', 5) RETURNING id, n")
    [key] = result.autoincrement_ids
    assert ours(key)
    assert result.rows == [[key, 5]]
    assert twin.mapped(result.rows, 0) == plain


def test_rows_come_back_in_the_order_written_whoever_chose_their_keys(twin: Twin) -> None:
    result, plain = twin.run(
        "INSERT INTO st(id, name) VALUES (NULL, 'a'), (100, 'b'), (NULL, 'c'), (7, 'd'), (-1, 'e') RETURNING *"
    )
    ids = result.autoincrement_ids
    assert [row[0] for row in result.rows] == [ids[0], 100, ids[1], 7, ids[2]]
    assert all(map(ours, ids)) and len(set(ids)) == 3
    # -1 is documented to mean "assign one" (docs/decisions.md); SQLite stores -1 itself
    assert twin.mapped(result.rows[:4], 0) == plain[:4] and plain[4][0] == -1
    twin.keys[ids[2]] = ids[2]

    result, plain = twin.run(
        "INSERT INTO st(name, n) SELECT 'from ' || value, key FROM json_each('[\"x\", \"z\", \"y\"]')"
        " ORDER BY value DESC RETURNING id, name, n"
    )
    assert [row[1] for row in result.rows] == ["from z", "from y", "from x"]
    assert [row[0] for row in result.rows] == result.autoincrement_ids
    assert twin.mapped(result.rows, 0) == plain


def test_returning_expressions_star_and_rowid_mean_what_they_mean_in_sqlite(twin: Twin) -> None:
    result, plain = twin.run(
        "INSERT INTO st(name, n, tag) VALUES ('ann', 4, 'abc'), ('bob', '7', 'XYZ')"
        " RETURNING id, id * 2, upper(name), tag = 'ABC', typeof(n), n = '4', st.name, rowid, g, *"
    )
    assert [row[1] for row in result.rows] == [2 * row[0] for row in result.rows]
    assert [row[3:6] for row in result.rows] == [[1, "integer", 1], [0, "integer", 0]]
    without_doubled = [row[:1] + row[2:] for row in result.rows]
    assert twin.mapped(without_doubled, 0, 6, 8) == [row[:1] + row[2:] for row in plain]


def test_parameters_of_the_returning_clause_take_the_statements_values(twin: Twin) -> None:
    result, plain = twin.run(
        "INSERT INTO st(name, n) VALUES (?, ?), (?, ?2) RETURNING id, ?, n + ?2, ?6 || ?",
        ("a", 1, "b", "tag", 10, "six", "!"),
    )
    assert [row[1:] for row in result.rows] == [["tag", 2, "six!"], ["tag", 2, "six!"]]
    assert twin.mapped(result.rows, 0) == plain
    result, plain = twin.run(
        "INSERT INTO st(name, n) VALUES (:name, :n) /* RETURNING :nope */ RETURNING id, :n * 2, $tag, 'RETURNING ?'",
        {"name": "c", "n": 3, "tag": "t"},
    )
    assert result.rows[0][1:] == [6, "t", "RETURNING ?"]
    assert twin.mapped(result.rows, 0) == plain


def test_upserts_with_keys_left_to_the_database_act_and_return_as_in_sqlite(twin: Twin) -> None:
    first, _ = twin.run("INSERT INTO st(name, n) VALUES ('ann', 1), ('bob', 2) RETURNING id")
    ann, bob = (row[0] for row in first.rows)

    result, plain = twin.run(
        "INSERT INTO st(name, n) VALUES ('ann', 10), ('cat', 3), ('bob', 20)"
        " ON CONFLICT(name) DO UPDATE SET n = n + excluded.n RETURNING id, name, n"
    )
    [cat] = result.autoincrement_ids
    assert result.rows == [[ann, "ann", 11], [cat, "cat", 3], [bob, "bob", 22]]
    assert twin.mapped(result.rows, 0) == plain

    result, plain = twin.run(
        "INSERT INTO st(id, name, n) VALUES (NULL, 'ann', 0), (NULL, 'dan', 4) ON CONFLICT DO NOTHING RETURNING *"
    )
    assert [row[1] for row in result.rows] == ["dan"] and len(result.autoincrement_ids) == 1
    assert twin.mapped(result.rows, 0) == plain

    result, plain = twin.run("INSERT OR REPLACE INTO st(name, n) VALUES ('bob', 99) RETURNING id, name, n")
    [new_bob] = result.autoincrement_ids
    assert result.rows == [[new_bob, "bob", 99]] and new_bob != bob
    assert twin.mapped(result.rows, 0) == plain

    result, plain = twin.run("REPLACE INTO st(id, name) VALUES (NULL, 'eve'), (500, 'ann') RETURNING id, name, n")
    assert [row[0] for row in result.rows] == [result.autoincrement_ids[0], 500]
    assert twin.mapped(result.rows, 0) == plain

    result, plain = twin.run("INSERT OR IGNORE INTO st(name) VALUES ('eve'), ('fay') RETURNING name")
    assert result.rows == plain == [["fay"]]
    assert result.row_count == 1 and len(result.autoincrement_ids) == 1

    result, plain = twin.run("INSERT OR IGNORE INTO st(name) VALUES ('fay') RETURNING name")
    assert (result.rows, result.row_count, result.autoincrement_ids) == ([], 0, [])

    result, plain = twin.run(
        "INSERT INTO st(name) VALUES ('gus'), ('gus') ON CONFLICT(name) DO UPDATE SET n = n + 1 RETURNING id, name, n"
    )
    [gus] = result.autoincrement_ids
    assert result.rows == [[gus, "gus", 0], [gus, "gus", 1]]
    assert twin.mapped(result.rows, 0) == plain


def test_update_and_delete_returning_are_sqlites_own(twin: Twin) -> None:
    twin.run("INSERT INTO st(name, n) VALUES ('a', 1), ('b', 2), ('c', 3)")
    result, plain = twin.run("UPDATE st SET n = n * 10 WHERE n > 1 RETURNING id, name, n, g")
    assert [row[1:] for row in result.rows] == [["b", 20, 200], ["c", 30, 300]]
    assert twin.mapped(result.rows, 0) == plain
    result, plain = twin.run("DELETE FROM st WHERE name <> 'b' RETURNING *")
    assert [row[1] for row in result.rows] == ["a", "c"]
    assert twin.mapped(result.rows, 0) == plain


def test_returning_shows_a_row_as_inserted_before_after_triggers_change_it(twin: Twin) -> None:
    trigger = "CREATE TRIGGER bump AFTER INSERT ON st BEGIN UPDATE st SET n = n + 100 WHERE id = new.id; END"
    run(twin.engine, trigger)
    twin.plain.execute(trigger)
    result, plain = twin.run("INSERT INTO st(id, name, n) VALUES (NULL, 'a', 1), (50, 'b', 2) RETURNING id, n, g")
    assert [row[1:] for row in result.rows] == [[1, 10], [2, 20]]
    assert twin.mapped(result.rows, 0) == plain
    assert select(twin.engine, "SELECT n FROM st ORDER BY name") == [[101], [102]]


def test_each_statement_of_a_request_gets_its_own_returning_rows(twin: Twin) -> None:
    result, plain = twin.run(
        "INSERT INTO st(name) VALUES ('a') RETURNING id, name;"
        " UPDATE st SET n = 5 RETURNING id, n;"
        " INSERT INTO st(id, name) VALUES (NULL, 'b'), (50, 'c') RETURNING id, name"
    )
    a, b = result.autoincrement_ids
    assert result.rows == [[a, "a"], [a, 5], [b, "b"], [50, "c"]]
    assert twin.mapped(result.rows, 0) == plain


def test_a_returning_expression_failing_on_an_assigned_row_leaves_nothing(twin: Twin) -> None:
    twin.fails("INSERT INTO st(name) VALUES ('[1]'), ('not json') RETURNING json(name)")
    twin.fails("INSERT INTO st(id, name) VALUES (3, 'x'), (NULL, 'x') RETURNING id")


def test_strict_tables_keep_their_types_in_returning(engine: Engine) -> None:
    twin = Twin(engine, "CREATE TABLE sx(id INTEGER PRIMARY KEY, name TEXT UNIQUE, a ANY) STRICT", table="sx")
    result, plain = twin.run(
        "INSERT INTO sx(name, a) VALUES ('t', '5'), ('i', 5), ('r', 5.0) RETURNING id, a, typeof(a), a = 5"
    )
    assert [row[1:] for row in result.rows] == [["5", "text", 0], [5, "integer", 1], [5.0, "real", 1]]
    assert twin.mapped(result.rows, 0) == plain


def test_a_table_with_its_own_conflict_clause_keeps_it_for_assigned_keys(engine: Engine) -> None:
    twin = Twin(engine, "CREATE TABLE rt(id INTEGER PRIMARY KEY, name TEXT UNIQUE ON CONFLICT REPLACE, n INT)",
                table="rt")
    first, _ = twin.run("INSERT INTO rt(name, n) VALUES ('a', 1) RETURNING id")
    result, plain = twin.run("INSERT INTO rt(name, n) VALUES ('a', 2) RETURNING id, name, n")
    [key] = result.autoincrement_ids
    assert result.rows == [[key, "a", 2]] and key != first.rows[0][0]
    assert twin.mapped(result.rows, 0) == plain


def test_returning_changes_nothing_that_is_captured(tmp_path: Path) -> None:
    plain_engine = open_engine(tmp_path / "a", INSTANCE_ID, FakeClock())
    returning_engine = open_engine(tmp_path / "b", INSTANCE_ID, FakeClock())
    statements = (
        "INSERT INTO st(id, name, n) VALUES (NULL, 'a', 1), (40, 'b', 2), (NULL, 'c', 3)",
        "INSERT INTO st(name, n) VALUES ('a', 7), ('d', 4) ON CONFLICT(name) DO UPDATE SET n = excluded.n",
        "INSERT OR REPLACE INTO st(name) VALUES ('b')",
    )
    for engine, suffix in ((plain_engine, ""), (returning_engine, " RETURNING *")):
        run(engine, SCHEMA)
        for sql in statements:
            run(engine, sql + suffix)
    assert [changes(r) for r in dml_records(returning_engine)] == [changes(r) for r in dml_records(plain_engine)]


def test_a_stream_transaction_returns_each_statements_assigned_keys(engine: Engine) -> None:
    run(engine, SCHEMA)
    txn = engine.begin(explicit=True)
    first = engine.execute(txn, "INSERT INTO st(name) VALUES ('a') RETURNING id")
    second = engine.execute(txn, "INSERT INTO st(name) VALUES ('b'), ('c') RETURNING id, name")
    engine.commit(txn)
    engine.flush()
    assert first.rows == [first.autoincrement_ids] and [r[0] for r in second.rows] == second.autoincrement_ids
    assert select(engine, "SELECT id, name FROM st ORDER BY id") == [first.rows[0] + ["a"], *second.rows]


def test_a_captured_insert_returns_the_keys_its_decided_row_writes_everywhere(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = open_engine(tmp_path / "a", INSTANCE_ID, clock)
    peer = open_engine(tmp_path / "b", 1, clock)
    run(engine, SCHEMA)
    txn = engine.begin(quorum=True)
    result = engine.execute(
        txn, "INSERT INTO st(id, name) VALUES (NULL, 'a'), (9, 'b'), (NULL, 'c') RETURNING id, name"
    )
    captured = engine.capture(txn)
    engine.flush()
    assert select(engine, "SELECT count(*) FROM st") == [[0]], "captured, not written"
    assert [r.new["id"] for r in captured.rows] == [row[0] for row in result.rows]
    engine.commit_captured(captured, txn_id=0x42, min_stamp=0)
    engine.flush()
    ship(engine, peer)
    for member in (engine, peer):
        assert select(member, "SELECT id, name FROM st ORDER BY rowid") == sorted(result.rows)
