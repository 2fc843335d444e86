"""The metastore's bytes layer: open and close, the LOCK, batches, durability across a
killed process, values that do not decode."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rocksdict

import replicaset.meta
from replicaset.meta import MetaError, MetaStore

ROOT = Path(__file__).resolve().parents[2]


def test_values_round_trip_and_survive_close_and_reopen(tmp_path):
    with MetaStore.open(tmp_path / "meta") as store:
        with store.batch(sync=False) as batch:
            batch.put(b"/repl/a", {1: 5, 2: 7})
            batch.put(b"/repl/b", [1, "x", b"y"])
            batch.put(b"/seq/1", 3)
        assert store.get(b"/repl/a") == {1: 5, 2: 7}
    with MetaStore.open(tmp_path / "meta") as store:
        assert list(store.scan(b"/repl/")) == [(b"/repl/a", {1: 5, 2: 7}), (b"/repl/b", [1, "x", b"y"])]
        assert list(store.scan_keys(b"/seq/")) == [b"/seq/1"]
        assert store.get(b"/repl/c") is None


def test_a_batch_that_raises_writes_nothing(tmp_path):
    with MetaStore.open(tmp_path) as store:
        with pytest.raises(RuntimeError), store.batch(sync=True) as batch:
            batch.put(b"/a", 1)
            raise RuntimeError("the change was not finished")
        assert store.get(b"/a") is None


def test_deletes_in_a_batch(tmp_path):
    with MetaStore.open(tmp_path) as store:
        with store.batch(sync=False) as batch:
            batch.put(b"/a/1", 1)
            batch.put(b"/a/2", 2)
        with store.batch(sync=False) as batch:
            batch.delete(b"/a/1")
        assert list(store.scan(b"/a/")) == [(b"/a/2", 2)]


def test_a_second_open_of_the_same_directory_refuses_naming_it(tmp_path):
    path = tmp_path / "meta"
    with MetaStore.open(path):
        with pytest.raises(MetaError, match=f"{path}.*already open"):
            MetaStore.open(path)
    MetaStore.open(path).close()


def test_a_closed_store_says_so(tmp_path):
    store = MetaStore.open(tmp_path)
    store.close()
    store.close()
    with pytest.raises(MetaError, match="closed"):
        store.get(b"/a")


def test_a_value_that_does_not_decode_names_its_key(tmp_path):
    db = rocksdict.Rdict(str(tmp_path), rocksdict.Options(raw_mode=True))
    db.put(b"/txn/00000000000000aa", b"\xc1 not msgpack")
    db.close()
    with MetaStore.open(tmp_path) as store, pytest.raises(MetaError, match="/txn/00000000000000aa"):
        store.get(b"/txn/00000000000000aa")


def test_a_synced_write_survives_a_killed_process(tmp_path):
    writer = textwrap.dedent(f"""
        import os
        from replicaset.meta import MetaStore
        store = MetaStore.open({str(tmp_path)!r})
        with store.batch(sync=True) as batch:
            batch.put(b"/txn_idx/pend/0000000000000001", 1)
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    with MetaStore.open(tmp_path) as store:
        assert store.get(b"/txn_idx/pend/0000000000000001") == 1


def test_the_metastore_imports_only_the_layers_below_it():
    allowed = {"replicaset.meta", "replicaset.core", "wal"}
    for path in sorted(Path(replicaset.meta.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                if name.startswith("replicaset") or name == "trio" or name.startswith("trio."):
                    assert any(name == a or name.startswith(a + ".") for a in allowed), f"{path.name} imports {name}"


def test_a_path_that_cannot_hold_a_database_names_itself(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    with pytest.raises(MetaError, match=f"cannot open metastore '{path}'"):
        MetaStore.open(path)


class _FailingDb:
    """RocksDB after a write met a full disk: every write and the close's flush refused."""

    def write(self, batch: object) -> None:
        raise Exception("IO error: No space left on device: While appending to file: 000004.log")

    def flush_wal(self, sync: bool) -> None:
        raise Exception("IO error: Writer has previous error.")

    def close(self) -> None:
        raise Exception("IO error: Writer has previous error.")


def test_a_failed_write_is_named_once_and_the_close_after_it_does_not_raise_again(tmp_path):
    from replicaset.meta.store import MetaWriteFailed

    store = MetaStore(tmp_path, _FailingDb())  # type: ignore[arg-type]
    with pytest.raises(MetaWriteFailed, match="write failed: IO error: No space left on device") as first:
        with store.batch(sync=False) as batch:
            batch.put(b"/a", 1)
    with pytest.raises(MetaWriteFailed) as later:
        store.sync()
    assert later.value is first.value is store.failed, "the first cause is what the member reports"
    assert "restart the member once space is freed" in str(first.value)
    store.close()  # the same condition, not a second failure


def test_a_close_that_fails_on_its_own_raises_naming_the_store(tmp_path):
    from replicaset.meta.store import MetaWriteFailed

    with pytest.raises(MetaWriteFailed, match="close failed"):
        MetaStore(tmp_path, _FailingDb()).close()  # type: ignore[arg-type]
