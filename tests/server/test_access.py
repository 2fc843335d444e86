"""Users, privileges and guest, through the PyPI `tarantool` connector as a user connects
(docs/access-control.md). One server serves the module's tests: each test uses tables of
its own, so they do not depend on their order."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import tarantool
import yaml

from replicaset.iproto.auth import password_hash
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import ReplicaSet, Server, wait_for
from tests.server.test_cli import cli

ADMIN = ("admin", "adm1n")
USERS_CONFIG = f"""
[auth.users]
{ADMIN[0]} = "{ADMIN[1]}"

[auth.users.reader]
password = "r"
grants = {{ "*" = ["read"] }}

[auth.users.clerk]
password_hash = "{base64.b64encode(password_hash("c")).decode()}"
grants = {{ accounts = ["read", "write"], notes = ["read"], orders = ["write"] }}

[auth.users.builder]
password = "b"
privileges = ["ddl"]

[auth.users.guest]
grants = {{ public = ["read"] }}
"""
SCHEMA = [
    "CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT, balance INTEGER)",
    "CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)",
    "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT)",
    "CREATE TABLE audit(id INTEGER PRIMARY KEY, item TEXT)",
    "CREATE TRIGGER orders_audit AFTER INSERT ON orders BEGIN INSERT INTO audit(item) VALUES (new.item); END",
    "CREATE TABLE public(id INTEGER PRIMARY KEY, v TEXT)",
    "INSERT INTO accounts VALUES (1, 'ann', 100)",
    "INSERT INTO notes VALUES (1, 'hello')",
    "INSERT INTO public VALUES (1, 'open')",
]


def connect(server: Server, user: str | None = None, password: str | None = None) -> tarantool.Connection:
    return tarantool.connect("127.0.0.1", server.port, user=user, password=password)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("access")
    config = root / "users.toml"
    config.write_text('replication.default_write_consistency = "one"\n' + USERS_CONFIG)
    srv = Server(root / "data", root / "server.log").start("--config", str(config))
    try:
        admin = connect(srv, *ADMIN)
        for sql in SCHEMA:
            admin.execute(sql)
        admin.close()
        yield srv
    finally:
        srv.stop()


def connect_refusal(server: Server, user: str | None = None, password: str | None = None) -> tuple[int, str]:
    """(code, message) of the error a connection is refused with: the connector reports
    it as a NetworkError around the server's DatabaseError, from a real Tarantool too."""
    with pytest.raises(tarantool.error.NetworkError) as refused:
        connect(server, user, password)
    cause = refused.value.args[0]
    assert isinstance(cause, tarantool.error.DatabaseError), cause
    return cause.args[0], cause.args[1]


def denied(call: Callable[..., Any], *args: Any) -> str:
    """The message of the ER_ACCESS_DENIED that `call(*args)` raises."""
    with pytest.raises(tarantool.error.DatabaseError) as refused:
        call(*args)
    assert refused.value.args[0] == ErrorCode.ACCESS_DENIED, refused.value.args
    return refused.value.args[1]


def count(conn: tarantool.Connection, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM {table}").data[0][0]


def test_wrong_password_and_unknown_user_are_refused_and_logged(server):
    assert connect_refusal(server, "reader", "nope")[0] == ErrorCode.CREDS_MISMATCH
    assert connect_refusal(server, "mallory", "x") == (ErrorCode.NO_SUCH_USER, "User 'mallory' is not found")
    refusals = wait_for(lambda: [e for e in server.log_events() if e["event"] == "login_refused"], "login_refused")
    assert {e["user"] for e in refusals} >= {"reader", "mallory"}
    assert all(e["level"] == "warning" and "instance_id" in e for e in refusals)
    assert "nope" not in server.log_path.read_text(), "a refused password is never logged"


def test_a_read_only_user_reads_and_changes_nothing(server):
    reader = connect(server, "reader", "r")
    admin = connect(server, *ADMIN)
    try:
        assert reader.execute("SELECT owner, balance FROM accounts WHERE id = 1").data == [["ann", 100]]
        for sql in ("INSERT INTO accounts VALUES (9, 'eve', 1)", "UPDATE accounts SET balance = 0 WHERE id = 1",
                    "DELETE FROM accounts WHERE id = 1", "DELETE FROM accounts"):
            assert denied(reader.execute, sql) == "Write access to space 'accounts' is denied for user 'reader'"
        assert admin.execute("SELECT id, owner, balance FROM accounts").data == [[1, "ann", 100]]
        assert denied(reader.execute, "CREATE TABLE mine(id INTEGER PRIMARY KEY)") == \
            "Create access to universe '' is denied for user 'reader'"
        assert denied(reader.execute, "DROP TABLE notes") == "Drop access to universe '' is denied for user 'reader'"
        assert denied(reader.eval, "box.info") == "Execute access to universe '' is denied for user 'reader'"
        assert reader.execute("SELECT text FROM notes").data == [["hello"]], "the connection keeps serving"
    finally:
        reader.close()
        admin.close()


def test_per_table_grants_and_a_statement_touching_two_tables(server):
    clerk = connect(server, "clerk", "c")  # configured by its password's hash
    admin = connect(server, *ADMIN)
    try:
        assert clerk.execute("INSERT INTO accounts VALUES (2, 'bob', 5)").affected_row_count == 1
        assert denied(clerk.execute, "INSERT INTO notes VALUES (2, 'x')") == \
            "Write access to space 'notes' is denied for user 'clerk'"
        # Write on orders, none on audit, which the trigger on orders writes: refused whole.
        assert denied(clerk.execute, "INSERT INTO orders VALUES (1, 'pen')") == \
            "Write access to space 'audit' is denied for user 'clerk'"
        # Two statements in one request, the second on a table the user may not write.
        assert denied(clerk.execute, "INSERT INTO accounts VALUES (3, 'cy', 1); INSERT INTO notes VALUES (3, 'y')") \
            == "Write access to space 'notes' is denied for user 'clerk'"
        # An UPDATE looks rows up: write alone is not enough, as in Tarantool.
        assert denied(clerk.execute, "UPDATE orders SET item = 'x' WHERE id = 1") == \
            "Read access to space 'orders' is denied for user 'clerk'"
        assert (count(admin, "orders"), count(admin, "audit"), count(admin, "notes")) == (0, 0, 1)
        assert admin.execute("SELECT id FROM accounts ORDER BY id").data == [[1], [2]], "nothing of id 3"
        assert denied(clerk.execute, "SELECT * FROM public") == "Read access to space 'public' is denied for user 'clerk'"
        spaces = {row[2] for row in clerk.select(281)}  # _vspace lists the tables it has a privilege on
        assert spaces == {"accounts", "notes", "orders"}
    finally:
        clerk.close()
        admin.close()


def test_ddl_privilege(server):
    builder = connect(server, "builder", "b")
    try:
        assert builder.execute("CREATE TABLE built(id INTEGER PRIMARY KEY)").affected_row_count == 1
        assert denied(builder.execute, "SELECT * FROM built") == "Read access to space 'built' is denied for user 'builder'"
        assert builder.execute("DROP TABLE built").affected_row_count == 1
    finally:
        builder.close()


def test_the_statement_cache_checks_each_user(server):
    """One text, alternately run by users who may and may not: every verdict is the user's."""
    sql, prepared = "INSERT INTO accounts VALUES (?, 'x', 0)", "SELECT text FROM notes WHERE id = ?"
    admin, reader, clerk = connect(server, *ADMIN), connect(server, "reader", "r"), connect(server, "clerk", "c")
    try:
        assert admin.execute(sql, [10]).affected_row_count == 1
        assert "Write access to space 'accounts'" in denied(reader.execute, sql, [11])
        assert clerk.execute(sql, [12]).affected_row_count == 1
        assert "Write access to space 'accounts'" in denied(reader.execute, sql, [13])
        assert admin.execute(sql, [14]).affected_row_count == 1
        assert [r[0] for r in admin.execute("SELECT id FROM accounts WHERE id >= 10 ORDER BY id").data] == [10, 12, 14]
        # The reverse order, and a refused text first: it must not be remembered as allowed.
        text = "DELETE FROM accounts WHERE id >= 10"
        assert "Write access" in denied(reader.execute, text)
        assert admin.execute(text).affected_row_count == 3
        assert "Read access to space 'notes'" in denied(connect(server).execute, prepared, [1])
        assert reader.execute(prepared, [1]).data == [["hello"]]
    finally:
        for conn in (admin, reader, clerk):
            conn.close()


def test_guest_has_only_what_is_granted_to_it(server):
    guest = connect(server)
    try:
        assert guest.execute("SELECT v FROM public").data == [["open"]]
        assert guest.execute("SELECT 1 + 1").data == [[2]]
        assert denied(guest.execute, "SELECT * FROM accounts") == "Read access to space 'accounts' is denied for user 'guest'"
        assert denied(guest.execute, "INSERT INTO public VALUES (2, 'x')") == \
            "Write access to space 'public' is denied for user 'guest'"
        assert denied(guest.eval, "box.info.cluster.uuid") == "Execute access to universe '' is denied for user 'guest'"
        assert {row[2] for row in guest.select(281)} == {"public"}
    finally:
        guest.close()


def test_console_needs_admin(server):
    address = f"127.0.0.1:{server.port}"
    anonymous = cli("console", address, "-e", "box.info.status")
    assert anonymous.returncode == 1 and "Execute access to universe" in anonymous.stderr
    reader = cli("console", address, "-e", "box.info.status", "--user", "reader", "--password", "r")
    assert reader.returncode == 1 and "denied for user 'reader'" in reader.stderr
    admin = cli("console", address, "-e", "box.cfg", "--user", ADMIN[0], "--password", ADMIN[1])
    assert admin.returncode == 0, admin.stdout + admin.stderr
    users = yaml.safe_load(admin.stdout)[0]["auth.users"]
    assert users["admin"] == "<hidden>" and users["reader"]["password"] == "<hidden>"
    assert "adm1n" not in admin.stdout and json.dumps(users).count("<hidden>") == 4


def test_guest_disabled_is_refused_with_a_clear_error(tmp_path: Path):
    config = tmp_path / "closed.toml"
    config.write_text('[auth]\nguest = false\nusers = { admin = "pw" }\n')
    srv = Server(tmp_path / "d", tmp_path / "log").start("--config", str(config))
    try:
        # The connector reads the schema on connect: refused there, with the reason.
        code, message = connect_refusal(srv)
        assert code == ErrorCode.ACCESS_DENIED and "guest access is disabled" in message and "log in" in message
        code, message = connect_refusal(srv, "guest")
        assert code == ErrorCode.ACCESS_DENIED and "guest access is disabled" in message
        with srv.client() as anonymous:  # our own client does not read the schema: refused at the request
            with pytest.raises(ServerError) as refused:
                anonymous.execute("SELECT 1")
            assert refused.value.code == ErrorCode.ACCESS_DENIED
            anonymous.ping()  # still answered
        admin = connect(srv, "admin", "pw")
        assert admin.execute("SELECT 1").data == [[1]]
        admin.close()
    finally:
        srv.stop()


def test_replicaset_with_guest_disabled_replicates(tmp_path: Path):
    """Peers' JOIN, SUBSCRIBE, ACK and quorum requests log in as no one."""
    rs = ReplicaSet(tmp_path, '[auth]\nguest = false\nusers = { admin = "pw" }\n')
    try:
        m1 = rs.bootstrap()
        m2 = rs.join(m1)
        m3 = rs.join(m2)
        with closing(connect(m1, "admin", "pw")) as admin:
            admin.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
            admin.execute("INSERT INTO kv VALUES (1, 'one')")
        with closing(connect(m3, "admin", "pw")) as admin3:
            admin3.execute("INSERT INTO kv VALUES (3, 'three')")
        # A QUORUM write, decided by the other members' answers to PREPARE (the connector
        # sends no OPTIONS, the CLI does).
        quorum = cli("sql", f"127.0.0.1:{m2.port}", "INSERT INTO kv VALUES (2, 'two')", "--consistency", "quorum",
                     "--user", "admin", "--password", "pw")
        assert quorum.returncode == 0, quorum.stderr
        for member in (m1, m2, m3):
            with closing(connect(member, "admin", "pw")) as conn:
                wait_for(lambda: conn.execute("SELECT k FROM kv ORDER BY k").data == [[1], [2], [3]],
                         f"rows on {member.data_dir.name}")
    finally:
        for member in rs.members:
            if member.proc is not None:
                member.stop()


def test_a_refused_statement_in_a_stream_transaction_leaves_it_as_it_was(server):
    """The stream's transaction holds the writer; a refusal must neither release nor
    poison it. PREPARE is checked as EXECUTE is: a prepared id never skips the check."""
    with server.client(user="clerk", password="c") as clerk:
        clerk.call(RequestType.BEGIN, {}, stream_id=5)
        clerk.execute("INSERT INTO accounts VALUES (40, 'in stream', 0)", stream_id=5)
        with pytest.raises(ServerError) as refused:
            clerk.execute("INSERT INTO notes VALUES (40, 'no')", stream_id=5)
        assert refused.value.code == ErrorCode.ACCESS_DENIED
        clerk.execute("INSERT INTO accounts VALUES (41, 'in stream', 0)", stream_id=5)
        clerk.call(RequestType.COMMIT, {}, stream_id=5)
        with pytest.raises(ServerError) as prepare:
            clerk.call(RequestType.PREPARE, {Key.SQL_TEXT: "DELETE FROM notes WHERE id = ?"})
        assert prepare.value.code == ErrorCode.ACCESS_DENIED and "Write access to space 'notes'" in prepare.value.message
    with server.client(user=ADMIN[0], password=ADMIN[1]) as admin:
        assert admin.execute("SELECT id FROM accounts WHERE owner = 'in stream' ORDER BY id").rows == [[40], [41]]
        assert admin.execute("SELECT count(*) FROM notes").rows == [[1]]
        admin.execute("DELETE FROM accounts WHERE owner = 'in stream'")
