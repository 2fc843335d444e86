"""Schemas as SQLite applications write them, on real processes. A table without a declared
PRIMARY KEY replicates: writes on every member at once, at every consistency level and in
stream transactions, reach every member with the same rowids, and a member that joins later
from a checkpoint holds the same rows (docs/decisions.md, "Tables without a declared key").
A table with VIRTUAL generated columns takes writes on every member, RETURNING gives the
computed values, and every member computes the same ones."""

from __future__ import annotations

import threading
from typing import Any

from replicaset.iproto.constants import RequestType
from tests.server.conftest import QUORUM, Server

EVENTS = "CREATE TABLE events(member INTEGER, n INTEGER, note TEXT)"
WRITES_PER_MEMBER = 20


def events(member: Server) -> list[list[Any]]:
    with member.client() as client:
        return client.execute("SELECT rowid, member, n, note FROM events ORDER BY rowid").rows


def test_concurrent_writes_to_a_table_without_a_key_converge_on_three_members(quorum_set) -> None:
    rs, members = quorum_set
    with members[0].client() as client:
        client.execute(EVENTS)
    rs.wait_converged()
    levels = ({}, QUORUM, {"consistency": "one"})

    def write(index: int, member: Server) -> None:
        with member.client() as client:
            for n in range(WRITES_PER_MEMBER):
                client.execute("INSERT INTO events(member, n, note) VALUES (?, ?, 'new')", [index, n],
                               options=levels[n % 3])
                if n % 4 == 3:
                    client.execute("UPDATE events SET note = 'seen' WHERE member = ? AND n = ?", [index, n - 1])
                if n % 5 == 4:
                    client.execute("DELETE FROM events WHERE member = ? AND n = ?", [index, n - 2])

    threads = [threading.Thread(target=write, args=(i, m)) for i, m in enumerate(members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    rs.wait_converged()
    first = events(members[0])
    assert len(first) == 3 * (WRITES_PER_MEMBER - WRITES_PER_MEMBER // 5)
    assert len({row[0] for row in first}) == len(first)
    assert sorted((m, n) for _, m, n, note in first if note == "seen") == sorted(
        (m, n - 1) for m in range(3) for n in range(3, WRITES_PER_MEMBER, 4) if (n - 1) % 5 != 2)
    for member in members[1:]:
        assert events(member) == first


def test_a_stream_transaction_and_a_later_joiner_see_the_same_rowids(quorum_set) -> None:
    rs, (first, second, third) = quorum_set
    with first.client() as client:
        client.execute(EVENTS)
    with second.client() as client:
        client.call(RequestType.BEGIN, {}, stream_id=1)
        inserted = client.execute("INSERT INTO events(member, n) VALUES (2, 1), (2, 2) RETURNING rowid, n",
                                  stream_id=1)
        client.execute("UPDATE events SET note = 'in stream' WHERE n = 2", stream_id=1)
        client.call(RequestType.COMMIT, {}, stream_id=1)
    assert [n for _, n in inserted.rows] == [1, 2]
    rs.wait_converged()
    with third.client() as client:
        client.execute("DELETE FROM events WHERE n = 1")
        client.eval("box.snapshot()")
    rs.wait_converged()
    expected = [[inserted.rows[1][0], 2, 2, "in stream"]]
    assert events(first) == events(second) == events(third) == expected
    joiner = rs.join(third)
    rs.wait_converged()
    assert events(joiner) == expected
    with joiner.client() as client:
        client.execute("INSERT INTO events(member, n) VALUES (4, 1)")
    rs.wait_converged()
    assert events(first) == events(joiner) and len(events(first)) == 2


def test_virtual_generated_columns_answer_the_same_on_every_member(quorum_set) -> None:
    rs, members = quorum_set
    with members[0].client() as client:
        client.execute("CREATE TABLE people(id INTEGER PRIMARY KEY, first TEXT, last TEXT,"
                       " full TEXT GENERATED ALWAYS AS (first || ' ' || last) VIRTUAL)")
    rs.wait_converged()
    returned = []
    for i, member in enumerate(members):
        rs.wait_converged()  # a QUORUM write may not have reached the third member yet: the update below needs it
        with member.client() as client:
            returned += client.execute("INSERT INTO people(first, last) VALUES (?, 'lee') RETURNING id, full",
                                       [f"m{i}"]).rows
            client.execute("UPDATE people SET last = 'ho' WHERE first = ?", [f"m{(i + 1) % 3}"])
    rs.wait_converged()
    held = [rows_of(m, "SELECT id, first, full FROM people ORDER BY id") for m in members]
    assert held[0] == held[1] == held[2]
    assert sorted(full for _, full in returned) == ["m0 lee", "m1 lee", "m2 lee"]
    assert {row_id for row_id, _ in returned} == {row_id for row_id, _, _ in held[0]}
    # Each member updated the next one's row: only m0's existed yet (member 3 wrote last).
    assert sorted(full for _, _, full in held[0]) == ["m0 ho", "m1 lee", "m2 lee"]


def rows_of(member: Server, sql: str) -> list[list[Any]]:
    with member.client() as client:
        return client.execute(sql).rows


def test_last_insert_rowid_and_changes_answer_each_clients_own_statements(quorum_set) -> None:
    """SQLite's per-connection values, per client session: another client's insert between
    two of mine does not move my last_insert_rowid(), which a child row takes as its key."""
    rs, (first, second, _) = quorum_set
    with first.client() as client:
        client.execute("CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT)")
        client.execute("CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id), v TEXT)")
    rs.wait_converged()
    with first.client() as mine, first.client() as other, second.client() as elsewhere:
        assigned = mine.execute("INSERT INTO parent(name) VALUES ('mine')").autoincrement_ids
        other.execute("INSERT INTO parent(name) VALUES ('other')")
        elsewhere.execute("INSERT INTO parent(id, name) VALUES (1000, 'elsewhere')")
        mine.execute("INSERT INTO child(parent, v) VALUES (last_insert_rowid(), 'a'), (last_insert_rowid(), 'b')")
        assert mine.execute("SELECT changes(), total_changes()").rows == [[2, 3]]
        mine.execute("UPDATE child SET v = v || '!' WHERE v = 'zzz'")
        assert mine.execute("SELECT changes(), total_changes()").rows == [[0, 3]]
        assert elsewhere.execute("SELECT last_insert_rowid(), changes()").rows == [[1000, 1]]
    rs.wait_converged()
    assert rows_of(second, "SELECT c.v, p.name FROM child c JOIN parent p ON p.id = c.parent ORDER BY c.v") == [
        ["a", "mine"], ["b", "mine"]]
    assert rows_of(second, "SELECT parent FROM child") == [[assigned[0]], [assigned[0]]]
