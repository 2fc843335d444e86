"""ALTER TABLE ... RENAME, RENAME COLUMN and DROP COLUMN, and a migration tool's table
rebuild, on three members taking writes all along (issue 36; docs/decisions.md, "Renames
and dropped columns follow the schema id"): every write a client was told is done is on
every member afterwards, in its column, and the members hold the same rows."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from replicaset.iproto.errors import ServerError
from tests.server.conftest import ReplicaSet, Server, wait_for
from tests.server.test_ddl_lock import no_errors_logged, tables
from tests.server.test_replicaset import rows

WRITE_TRIES_MAX = 200


@dataclass
class Shape:
    """The table's name and its columns besides `id`, as the test last changed them."""

    table: str = "t"
    columns: tuple[str, ...] = ("a", "b")


@dataclass
class Writer:
    """Inserts rows `base + n` into whatever `Shape` says, again when a statement meets the
    schema it was not written for, and keeps the ids it was told are done."""

    member: Server
    base: int
    shape: Shape
    consistency: str
    done: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)

    def run(self) -> None:
        try:
            with self.member.client() as client:
                n = 0
                while not self.stop.is_set():
                    if self.paused.is_set():
                        time.sleep(0.01)
                        continue
                    n += 1
                    self._insert(client, self.base + n)
        except BaseException as exc:  # reported by the test
            self.failure.append(exc)

    def _insert(self, client, row_id: int) -> None:
        for _ in range(WRITE_TRIES_MAX):
            shape = self.shape
            values = [f"{c}{row_id}" if c != "z" else f"a{row_id}" for c in shape.columns]
            names = ", ".join(("id", *shape.columns))
            try:
                client.execute(f"INSERT INTO {shape.table}({names}) VALUES ({', '.join('?' * (1 + len(values)))})",
                               [row_id, *values], options={"consistency": self.consistency})
            except ServerError as exc:  # a schema moved under it, or a conflict: try again
                if not any(word in exc.message for word in ("no such", "has no column", "conflict", "DDL")):
                    raise
                time.sleep(0.01)
                continue
            self.done.append(row_id)
            return
        raise AssertionError(f"row {row_id} was never written")


@pytest.fixture
def three(replicaset_factory) -> tuple[ReplicaSet, list[Server]]:
    rs: ReplicaSet = replicaset_factory("replication.synchro_timeout_s = 5\n")
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b TEXT)")
        client.execute("CREATE TABLE other(id INTEGER PRIMARY KEY, v TEXT)")
    second = rs.join(first)
    third = rs.join(second)
    rs.wait_converged()
    return rs, [first, second, third]


def writers_on(members: list[Server], shape: Shape) -> list[Writer]:
    writers = [Writer(member, 1_000_000 * (i + 1), shape, "one" if i == 2 else "quorum")
               for i, member in enumerate(members)]
    for writer in writers:
        threading.Thread(target=writer.run, daemon=True).start()
    return writers


def wait_written(writers: list[Writer], count: int) -> None:
    """Until every writer has `count` more rows done than now."""
    goals = [len(w.done) + count for w in writers]
    deadline = time.monotonic() + 30
    while any(len(w.done) < goal for w, goal in zip(writers, goals)):
        assert not any(w.failure for w in writers), [w.failure for w in writers]
        assert time.monotonic() < deadline, "the writers stalled"
        time.sleep(0.02)


def stop(writers: list[Writer]) -> None:
    for writer in writers:
        writer.stop.set()
    time.sleep(0.2)
    assert not any(w.failure for w in writers), [w.failure for w in writers]


def ddl(member: Server, sql: str) -> None:
    """A DDL statement, again while another holds the lock."""
    with member.client() as client:
        for _ in range(WRITE_TRIES_MAX):
            try:
                client.execute(sql)
                return
            except ServerError as exc:
                if "DDL lock" not in exc.message and "conflict" not in exc.message:
                    raise
                time.sleep(0.05)
    raise AssertionError(f"{sql!r} never ran")


def same_everywhere(rs: ReplicaSet, members: list[Server], sql: str) -> list:
    rs.wait_converged()
    found = [rows(member, sql) for member in members]
    assert found[1] == found[0] and found[2] == found[0], "the members hold different rows"
    return found[0]


def test_rename_table_rename_column_and_drop_column_with_writes_on_every_member(three) -> None:
    rs, members = three
    first, second, third = members
    shape = Shape()
    writers = writers_on(members, shape)
    wait_written(writers, 10)
    ddl(second, "ALTER TABLE t RENAME TO u")
    shape.table = "u"
    wait_written(writers, 10)
    ddl(third, "ALTER TABLE u RENAME COLUMN a TO z")
    shape.columns = ("z", "b")
    wait_written(writers, 10)
    ddl(first, "ALTER TABLE u DROP COLUMN b")
    shape.columns = ("z",)
    wait_written(writers, 10)
    stop(writers)
    assert tables(first) == ["other", "u"]
    held = same_everywhere(rs, members, "SELECT id, z FROM u ORDER BY id")
    done = sorted(i for w in writers for i in w.done)
    assert [row[0] for row in held] == done, "a write the client was told is done is missing, or one is extra"
    assert all(z == f"a{row_id}" for row_id, z in held), "a value landed in another column"
    assert rows(third, "SELECT name FROM pragma_table_info('u') ORDER BY cid") == [["id"], ["z"]]
    no_errors_logged(*members)


def test_a_rebuild_renamed_into_place_keeps_every_write(three) -> None:
    """Alembic batch mode's statements one at a time: create the new table, copy, drop the
    old, rename the new into place. Writes go on to another table throughout and to the
    table before and after; what the copy saw and what came after the rename is kept, and
    the new table's auto ids and RETURNING work on every member.
    `tests/storage/test_renames.py` shows where a write the copy missed goes."""
    rs, members = three
    first, second, third = members
    shape = Shape()
    writers = writers_on(members, shape)
    wait_written(writers, 10)
    for writer in writers:
        writer.paused.set()
    time.sleep(0.2)
    rs.wait_converged()
    side = writers_on(members, Shape(table="other", columns=("v",)))
    ddl(first, "CREATE TABLE _alembic_tmp_t(id INTEGER PRIMARY KEY, a TEXT, b TEXT, c TEXT DEFAULT 'c')")
    with first.client() as client:
        client.execute("INSERT INTO _alembic_tmp_t(id, a, b) SELECT id, a, b FROM t")
    ddl(first, "DROP TABLE t")
    ddl(first, "ALTER TABLE _alembic_tmp_t RENAME TO t")
    # A write to the old table that the copy missed goes with the old table, on every member
    # alike, as on one SQLite database (docs/decisions.md): the writers wait for the rename.
    for member in members:
        wait_for(lambda m=member: ["c"] in rows(m, "SELECT name FROM pragma_table_info('t')"), "the rebuilt table")
    for writer in writers:
        writer.paused.clear()
    wait_written(writers, 10)
    wait_written(side, 10)
    stop(writers + side)
    held = same_everywhere(rs, members, "SELECT id, a, b, c FROM t ORDER BY id")
    done = sorted(i for w in writers for i in w.done)
    assert [row[0] for row in held] == done
    assert all(row[1:] == [f"a{row[0]}", f"b{row[0]}", "c"] for row in held)
    other = same_everywhere(rs, members, "SELECT id FROM other ORDER BY id")
    assert [row[0] for row in other] == sorted(i for w in side for i in w.done)
    for member in members:
        with member.client() as client:
            [[row_id, c]] = client.execute("INSERT INTO t(a, b) VALUES ('auto', 'auto') RETURNING id, c").rows
        assert c == "c" and row_id % 32 == rs.info(member)["id"], "the id is this member's own"
    same_everywhere(rs, members, "SELECT * FROM t ORDER BY id")
    no_errors_logged(*members)
