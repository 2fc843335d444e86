"""The console's expression evaluator over a `box` of the test's own: what a Tarantool
operator types at the prompt, or a connector sends as EVAL, evaluates as in Lua."""

from typing import Any

import pytest
import trio
import yaml

from replicaset.console import ConsoleError, Entry, evaluate, to_yaml

INFO = {
    "id": 1,
    "vclock": {0: 3, 1: 5, 2: 7},
    "cluster": {"uuid": "u"},
    "replication": {
        1: {"id": 1, "uuid": "u1", "lsn": 5},
        2: {"id": 2, "uuid": "u2", "lsn": 7, "upstream": {"status": "follow", "idle": 0.1, "peer": "127.0.0.1:3302",
                                                           "lag": 0.0},
            "downstream": {"status": "follow", "vclock": {1: 5}, "idle": 0.2, "lag": 0.0}},
    },
    "members": [{"id": 1, "state": "alive"}, {"id": 2, "state": "dead"}],
    "gc": {"kept_because": "peer 2"},
}
CFG = {"wal_mode": "write", "replication": ["127.0.0.1:3302"], "replication.synchro_timeout_s": 5.0,
       "wal.group_commit_rows_max": 8}
GC_CALL = {"vclock": {1: 2}, "signature": 2, "consumers": [{"name": "replica u2", "vclock": {1: 5}, "signature": 5}]}


class Box:
    """A `box` whose functions record what they were called with."""

    def __init__(self) -> None:
        self.configured: list[Any] = []

    async def snapshot(self) -> str:
        return "ok"

    async def remove(self, instance_id: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"removed": instance_id, **(options or {})}

    async def cfg_call(self, options: Any = None) -> None:
        self.configured.append(options)

    async def gc_call(self) -> dict[str, Any]:
        return GC_CALL

    async def info_call(self) -> dict[str, Any]:
        return INFO

    def entry(self) -> Entry:
        return Entry(fields={
            "info": Entry(read=lambda: INFO, call=self.info_call, fields={"gc": Entry(read=lambda: INFO["gc"],
                                                                                      call=self.gc_call)}),
            "cfg": Entry(read=lambda: CFG, call=self.cfg_call),
            "snapshot": Entry(call=self.snapshot),
            "remove": Entry(call=self.remove),
        })


def run(expr: str, box: Box | None = None) -> Any:
    return trio.run(evaluate, expr, (box or Box()).entry())


def test_paths_into_info_and_cfg():
    assert run("box.info") == INFO
    assert run("box.info()") == INFO
    assert run("box.info.vclock") == INFO["vclock"]
    assert run(" box.info.cluster.uuid ") == "u"
    assert run("box.cfg.wal_mode") == "write"
    assert run("box.snapshot()") == "ok"


def test_indexing_into_tables_then_fields_as_an_operator_types_it():
    """The path of issue 32: index a table by a number, then go on by names."""
    assert run("box.info.replication[2].upstream.status") == "follow"
    assert run("box.info.replication[2].downstream.vclock[1]") == 5
    assert run("box.info.replication[2]['upstream'][\"peer\"]") == "127.0.0.1:3302"
    assert run("box.info.vclock[2]") == 7
    assert run("box.info.vclock[0]") == 3
    assert run("box.info['id']") == 1
    assert run("box.info.members[2].state") == "dead", "arrays count from 1, as in Lua"
    assert run("box.cfg.replication[1]") == "127.0.0.1:3302"


def test_a_connector_eval_may_start_with_return():
    assert run("return box.info.replication[2].upstream.status") == "follow"
    assert run("return box.info.id;") == 1


def test_a_missing_field_is_nil_and_indexing_nil_is_an_error_naming_the_path():
    """As in Lua: `box.info.replication[1].upstream` (ourselves) is nil, and going on from
    there is "attempt to index"."""
    assert run("box.info.replication[1].upstream") is None
    assert run("box.info.replication[9]") is None
    assert run("box.info.members[3]") is None
    assert run("box.info.nope") is None
    assert run("box.nothing") is None
    with pytest.raises(ConsoleError, match=r"attempt to index box.info.replication\[1\].upstream \(a nil value\)"):
        run("box.info.replication[1].upstream.status")
    with pytest.raises(ConsoleError, match=r"attempt to index box.info.id \(a number value\)"):
        run("box.info.id.x")


def test_dotted_option_names_are_reached_by_the_path_they_spell():
    """`replication` is both Tarantool's list and our section: the longest name wins."""
    assert run("box.cfg.wal.group_commit_rows_max") == 8
    assert run("box.cfg.replication.synchro_timeout_s") == 5.0
    assert run("box.cfg['wal.group_commit_rows_max']") == 8


def test_a_table_that_is_also_a_function():
    """`box.info.gc` is our table, `box.info.gc()` Tarantool's; both go on by indexing."""
    assert run("box.info.gc.kept_because") == "peer 2"
    assert run("box.info.gc()") == GC_CALL
    assert run("box.info.gc().consumers[1].name") == "replica u2"
    assert run("box.info.gc().signature") == 2


def test_box_cfg_takes_a_table_as_lua_calls_with_one():
    box = Box()
    assert run("box.cfg{read_only = true}", box) is None
    run("box.cfg({log_level = 'debug', replication_timeout = 0.5, checkpoint_interval = 1e2})", box)
    run('box.cfg{["replication.synchro_timeout_s"] = 3; replication_connect_quorum = -1,}', box)
    run("box.cfg{replication = {'127.0.0.1:1', \"127.0.0.1:2\"}, skip = nil}", box)
    run("box.cfg()", box)
    run("box.cfg{}", box)
    assert box.configured == [
        {"read_only": True},
        {"log_level": "debug", "replication_timeout": 0.5, "checkpoint_interval": 100.0},
        {"replication.synchro_timeout_s": 3, "replication_connect_quorum": -1},
        {"replication": ["127.0.0.1:1", "127.0.0.1:2"]},
        None,
        {},
    ]


def test_calls_take_integers_booleans_strings_and_option_tables():
    assert run("box.remove(3)") == {"removed": 3}
    assert run("box.remove( 3 , {force = true} )") == {"removed": 3, "force": True}
    assert run("box.remove(3, {force = false, wait = 2})") == {"removed": 3, "force": False, "wait": 2}
    assert run("box.remove('3')") == {"removed": "3"}, "the function checks its arguments' types"
    assert run(r"box.remove('a\'b\n')") == {"removed": "a'b\n"}


@pytest.mark.parametrize("expr, why", [
    ("os.exit()", "try box.info"),
    ("box.info; drop", "unexpected 'drop'"),
    ("box.nothing()", r"attempt to call box.nothing \(not a function\)"),
    ("box", "box is not a value: try box.info"),
    ("box.snapshot", r"box.snapshot is a function: call it, box.snapshot\(\)"),
    ("box.info.vclock()", "not a function"),
    ("box.remove(3, {force})", "force"),
    ("box.remove(3, {force = true)", "expected '}'"),
    ("box.remove(3, {force = yes})", "'yes' is not a value"),
    ("box.remove(1, 2, 3)", "too many"),
    ("box.snapshot(1)", "too many"),
    ("box.remove(3 {force = true})", "expected"),
    ("box.remove(3, {1, force = true})", "mixes named and positional"),
    ("box.remove(" + "{" * 9 + "}" * 9 + ")", "8 deep"),
    ("box.remove(" + "9" * 21 + ")", "20 digits"),
    ("box.remove(1e999)", "not a finite number"),
    ("box.remove('a\\qb')", r"unknown escape"),
    ("box.remove('open)", "unexpected"),
    ("box.info[true]", "a key is an integer or a string"),
    ("box.cfg{[{}] = 1}", "a table key is a number, a string or a boolean"),
    ("box.cfg{[nil] = 1}", "a table key is a number, a string or a boolean"),
    ("box.info.", "expected a name"),
])
def test_unknown_expressions_are_refused_saying_why(expr, why):
    with pytest.raises(ConsoleError, match=why):
        run(expr)


def test_yaml_is_a_tarantool_style_document():
    text = to_yaml({"vclock": {1: 5}})
    assert text.startswith("---\n") and text.endswith("...\n")
    assert yaml.safe_load(text) == [{"vclock": {1: 5}}]
