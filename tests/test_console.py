import pytest
import trio
import yaml

from replicaset.console import ConsoleError, evaluate, to_yaml

VALUES = {"box.info": lambda: {"id": 1, "vclock": {1: 5}, "cluster": {"uuid": "u"}}, "box.cfg": lambda: {"wal_mode": "write"}}


async def snapshot():
    return "ok"


def run(expr):
    return trio.run(evaluate, expr, VALUES, {"box.snapshot": snapshot})


def test_paths_into_info_and_cfg():
    assert run("box.info") == VALUES["box.info"]()
    assert run("box.info.vclock") == {1: 5}
    assert run(" box.info.cluster.uuid ") == "u"
    assert run("box.cfg.wal_mode") == "write"
    assert run("box.snapshot()") == "ok"


@pytest.mark.parametrize("expr", ["box.info.nope", "os.exit()", "box.info; drop", "box.nothing()", "box"])
def test_unknown_expressions_are_refused(expr):
    with pytest.raises(ConsoleError):
        run(expr)


def test_yaml_is_a_tarantool_style_document():
    text = to_yaml({"vclock": {1: 5}})
    assert text.startswith("---\n") and text.endswith("...\n")
    assert yaml.safe_load(text) == [{"vclock": {1: 5}}]
