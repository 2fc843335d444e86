import pytest
import trio
import yaml

from replicaset.console import ConsoleError, evaluate, to_yaml

VALUES = {"box.info": lambda: {"id": 1, "vclock": {1: 5}, "cluster": {"uuid": "u"}}, "box.cfg": lambda: {"wal_mode": "write"}}


async def snapshot():
    return "ok"


async def remove(instance_id, options=None):
    return {"removed": instance_id, **(options or {})}


def run(expr):
    return trio.run(evaluate, expr, VALUES, {"box.snapshot": snapshot, "box.remove": remove})


def test_paths_into_info_and_cfg():
    assert run("box.info") == VALUES["box.info"]()
    assert run("box.info.vclock") == {1: 5}
    assert run(" box.info.cluster.uuid ") == "u"
    assert run("box.cfg.wal_mode") == "write"
    assert run("box.snapshot()") == "ok"


def test_calls_take_integers_booleans_and_option_tables():
    assert run("box.remove(3)") == {"removed": 3}
    assert run("box.remove( 3 , {force = true} )") == {"removed": 3, "force": True}
    assert run("box.remove(3, {force = false, wait = 2})") == {"removed": 3, "force": False, "wait": 2}


@pytest.mark.parametrize("expr", ["box.info.nope", "os.exit()", "box.info; drop", "box.nothing()", "box",
                                  "box.remove('3')", "box.remove(3, {force})", "box.remove(3, {force = true)",
                                  "box.remove(3, {force = yes})", "box.remove(1, 2, 3)", "box.snapshot(1)",
                                  "box.remove(3 {force = true})"])
def test_unknown_expressions_are_refused(expr):
    with pytest.raises(ConsoleError):
        run(expr)


def test_yaml_is_a_tarantool_style_document():
    text = to_yaml({"vclock": {1: 5}})
    assert text.startswith("---\n") and text.endswith("...\n")
    assert yaml.safe_load(text) == [{"vclock": {1: 5}}]
