"""Virtual tables on real processes: FTS5 with external content (kept by SQLite's documented
triggers), FTS5 with its own content and R*Tree, written on every member, at ONE and at
QUORUM, answer every query alike on every member, on one that joined later from a
checkpoint too (docs/design/virtual_tables.md)."""

from __future__ import annotations

from tests.server.conftest import QUORUM, ReplicaSet, Server

SCHEMA = (
    "CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)",
    "CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id')",
    "CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN"
    " INSERT INTO docs_fts(docs_fts, rowid, body) VALUES ('delete', old.id, old.body); END",
    "CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN"
    " INSERT INTO docs_fts(docs_fts, rowid, body) VALUES ('delete', old.id, old.body);"
    " INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE VIRTUAL TABLE notes USING fts5(title, body)",
    "CREATE VIRTUAL TABLE geo USING rtree(id, minx, maxx, miny, maxy)",
)
QUERIES = (
    "SELECT rowid, body FROM docs_fts WHERE docs_fts MATCH 'hello' ORDER BY rowid",
    "SELECT rowid, body FROM docs_fts WHERE docs_fts MATCH 'quorum OR edited' ORDER BY rowid",
    "SELECT rowid, title FROM notes WHERE notes MATCH 'hello' ORDER BY rowid",
    "SELECT id FROM geo WHERE minx <= 15 AND maxx >= 5 ORDER BY id",
)


def answers(member: Server) -> list[list]:
    with member.client() as client:
        return [client.execute(sql).rows for sql in QUERIES]


def write(member: Server, n: int) -> None:
    with member.client() as client:
        client.execute("INSERT INTO docs(body) VALUES (?)", [f"hello from member {n}"])
        client.execute("INSERT INTO notes(rowid, title, body) VALUES (?, ?, ?)", [n, f"note {n}", "hello notes"])
        client.execute("INSERT INTO geo VALUES (?, ?, ?, 0, 1)", [n, 4 * n, 4 * n + 2])


def test_virtual_tables_answer_alike_on_every_member_and_on_a_joiner(replicaset: ReplicaSet) -> None:
    first = replicaset.bootstrap()
    with first.client() as client:
        for ddl in SCHEMA:
            client.execute(ddl)
    members = [first, replicaset.join(first), replicaset.join(first)]
    replicaset.wait_converged()
    for n, member in enumerate(members, start=1):
        write(member, n)
    replicaset.wait_converged()  # the changes below are of rows other members wrote
    with members[1].client() as client:
        client.execute("INSERT INTO docs(body) VALUES ('written at quorum')", options=QUORUM)
        client.execute("UPDATE docs SET body = 'hello edited' WHERE body = 'hello from member 1'")
        client.execute("DELETE FROM notes WHERE rowid = 3", options=QUORUM)
        client.execute("UPDATE geo SET minx = 100, maxx = 101 WHERE id = 1")
    replicaset.wait_converged()
    expected = answers(first)
    assert [len(rows) for rows in expected] == [3, 2, 2, 2], expected
    for member in members:
        assert answers(member) == expected

    joiner = replicaset.join(members[2])
    replicaset.wait_converged()
    assert answers(joiner) == expected
    write(joiner, 4)
    replicaset.wait_converged()
    expected = answers(first)
    assert [len(rows) for rows in expected] == [4, 2, 3, 2], expected
    for member in [*members, joiner]:
        assert answers(member) == expected
