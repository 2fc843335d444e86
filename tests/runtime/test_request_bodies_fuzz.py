"""The decoders of client request bodies under hostile values, in-process.

A session answers a request whose body it cannot use with an error reply and keeps the
connection (`Session._handle_reporting` catches `RequestError` and `RemoteProtocolError`);
any other exception ends the whole connection as a server bug (`session_failed`). So each
decoder a handler calls on a body field must raise one of those two, naming the field, or
return values the handler can use unchecked: SQL_BIND (`decode_binds`), a SELECT body
(`decode_select`, `select_system_view`), STMT_ID (`PreparedStatements`), OPTIONS
(`session._options`) and EVAL's expression (`console.evaluate`).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from replicaset.console import ConsoleError, Entry, evaluate
from replicaset.core.quorum import Level
from replicaset.iproto.constants import Key
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.prepared import PreparedStatements
from replicaset.iproto.sql_wire import decode_binds
from replicaset.iproto.system_views import (
    Field,
    Space,
    SystemView,
    build_system_views,
    decode_select,
    select_system_view,
)
from replicaset.runtime.errors import RequestError
from replicaset.runtime.session import _options
from tests.fuzzing import body_dicts, examples, field_mutations, fuzz, keys, mutate_fields, scalars, values
from wal import VClock

REFUSALS = (RequestError, RemoteProtocolError)
SCALAR_TYPES = (type(None), bool, int, float, str, bytes)


def _refused_cleanly(exc: Exception) -> None:
    assert isinstance(exc, REFUSALS), repr(exc)
    if isinstance(exc, RemoteProtocolError):
        assert not exc.fatal
    assert exc.message


@examples(ci=300, deep=30_000)
def test_sql_bind_decodes_to_sqlite_values_or_is_refused(max_examples: int) -> None:
    binds = values | st.lists(scalars | st.dictionaries(keys, scalars, max_size=2), max_size=6)

    @fuzz(max_examples)
    @given(raw=binds)
    def check(raw: Any) -> None:
        try:
            decoded = decode_binds(raw)
        except Exception as exc:  # noqa: BLE001 - the test is which exceptions come out
            _refused_cleanly(exc)
            return
        items = decoded.values() if isinstance(decoded, dict) else decoded
        assert all(type(v) in SCALAR_TYPES for v in items)
        assert all(-(1 << 63) <= v < 1 << 63 for v in items if type(v) is int)
        if isinstance(decoded, dict):
            assert all(isinstance(k, str) and k for k in decoded)

    check()


VIEWS = build_system_views([
    Space(id=512, name="kv", fields=(Field(name="k", type="integer", is_nullable=False),
                                     Field(name="v", type="string", is_nullable=True)), primary_key=(0,)),
    Space(id=513, name="scratch", fields=(Field(name="x", type="any", is_nullable=True),), primary_key=()),
])
SELECT_FIELDS = [int(k) for k in (Key.SPACE_ID, Key.INDEX_ID, Key.KEY, Key.ITERATOR, Key.OFFSET, Key.LIMIT)]
VALID_SELECT = {Key.SPACE_ID: int(SystemView.VINDEX), Key.INDEX_ID: 0, Key.KEY: [512], Key.ITERATOR: 0,
                Key.OFFSET: 0, Key.LIMIT: 0xFFFFFFFF}


@examples(ci=300, deep=30_000)
def test_select_bodies_answer_rows_or_are_refused(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(body=body_dicts(SELECT_FIELDS) | field_mutations(SELECT_FIELDS, SELECT_FIELDS).map(lambda s: mutate_fields(VALID_SELECT, s)))
    def check(body: dict[int, Any]) -> None:
        try:
            rows = select_system_view(VIEWS, decode_select(body))
        except Exception as exc:  # noqa: BLE001
            _refused_cleanly(exc)
            return
        assert isinstance(rows, list) and all(isinstance(row, list) for row in rows)

    check()


@examples(ci=200, deep=20_000)
def test_statement_ids_name_a_statement_or_are_refused(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(ids=st.lists(values, max_size=4), unprepare=st.booleans())
    def check(ids: list[Any], unprepare: bool) -> None:
        prepared = PreparedStatements()
        known = prepared.prepare("SELECT 1")
        for stmt_id in [*ids, known]:
            try:
                (prepared.unprepare if unprepare else prepared.text)(stmt_id)
            except Exception as exc:  # noqa: BLE001
                _refused_cleanly(exc)
            prepared.check_invariants()

    check()


OPTION_KEYS = ["consistency", "wait_vclock"]


@examples(ci=300, deep=30_000)
def test_options_map_gives_a_level_and_a_vclock_or_is_refused(max_examples: int) -> None:
    option_maps = st.dictionaries(st.sampled_from(OPTION_KEYS) | keys, values, max_size=3)

    @fuzz(max_examples)
    @given(raw=values | option_maps | st.fixed_dictionaries({"wait_vclock": values}))
    def check(raw: Any) -> None:
        try:
            options = _options({Key.OPTIONS: raw}, Level.ONE)
        except Exception as exc:  # noqa: BLE001
            _refused_cleanly(exc)
            return
        assert isinstance(options.level, Level)
        assert options.wait_vclock is None or isinstance(options.wait_vclock, VClock)

    check()


@pytest.mark.parametrize("wait_vclock", [[1], "1:5", 1.5, True])
def test_a_wait_vclock_that_is_not_a_map_is_refused_by_name(wait_vclock: Any) -> None:
    """Found by the fuzzer: `VClock([1])` raised AttributeError, which ended the connection
    (`session_failed`) instead of answering the EXECUTE with an error."""
    with pytest.raises(RequestError, match="OPTIONS wait_vclock is not a vclock"):
        _options({Key.OPTIONS: {"wait_vclock": wait_vclock}}, Level.ONE)


async def _remove(instance_id: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"removed": instance_id}


async def _snapshot() -> str:
    return "ok"


async def _configure(options: Any = None) -> None:
    return None


CONSOLE_BOX = Entry(fields={
    "info": Entry(read=lambda: {"id": 1, "vclock": {1: 5}, "replication": {1: {"id": 1}}, "members": [{"id": 1}]}),
    "cfg": Entry(read=lambda: {"wal_mode": "write", "wal.group_commit_rows_max": 8}, call=_configure),
    "snapshot": Entry(call=_snapshot),
    "remove": Entry(call=_remove),
})
CONSOLE_CORPUS = ["box.info", "box.info.vclock", "box.snapshot()", "box.remove(3)", "box.remove(3, {force = true})",
                  "return box.info.replication[1].id", "box.cfg{read_only = true, log_level = 'debug'}",
                  "box.info.members[1]['id']", "box.cfg.wal.group_commit_rows_max", "box.cfg{[{}] = 1}"]


@examples(ci=300, deep=30_000)
def test_console_expressions_answer_or_are_refused(max_examples: int) -> None:
    pieces = st.sampled_from(["box", ".", "info", "remove", "(", ")", "{", "}", ",", "=", " ", "true", "9" * 5000,
                              "force", "-", "1", "\n", "٣", "[", "]", "'", '"', "\\", "return", "cfg", ";", "nil",
                              "1.5e308", "e9", "{" * 20])
    exprs = st.text(max_size=40) | st.lists(pieces, max_size=12).map("".join) | st.sampled_from(CONSOLE_CORPUS)

    @fuzz(max_examples)
    @given(expr=exprs)
    def check(expr: str) -> None:
        try:
            trio.run(evaluate, expr, CONSOLE_BOX)
        except ConsoleError as exc:
            assert str(exc)

    check()


def test_a_console_integer_too_long_for_python_is_refused_by_the_console() -> None:
    """Found by the fuzzer: an integer argument of more than 4300 digits made `int()` raise
    a bare ValueError (Python's digit limit), which the session does not answer."""
    with pytest.raises(ConsoleError, match="integer"):
        trio.run(evaluate, "box.remove(" + "9" * 5000 + ")", CONSOLE_BOX)

