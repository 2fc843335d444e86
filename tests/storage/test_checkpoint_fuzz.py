"""A checkpoint file that is garbage, truncated or damaged: its vclock, or a `CheckpointError`
naming the file.

A checkpoint reaches a member from a peer (JOIN) or from a disk that tears writes, and its
vclock (`vclock_of`) is read before it becomes a base: at start (`listing`, to set aside
or choose one), by `restore`, by the audit. Reading it must give a vclock or an error
that names the file; SQLite's own exceptions, raised deep in start, named nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replicaset.storage.checkpoint import SUFFIX, vclock_of
from replicaset.storage.errors import CheckpointError
from tests.fuzzing import byte_mutations, examples, fuzz, mutate_bytes
from tests.storage.enginekit import FakeClock, close_all, open_engine, run
from wal import VClock


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real checkpoint of an engine holding a few pages of rows."""
    data_dir = tmp_path_factory.mktemp("engine")
    engine = open_engine(data_dir, 1, FakeClock())
    run(engine, ("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)", ()))
    for i in range(40):
        run(engine, ("INSERT INTO t VALUES (?, ?)", (i, "v" * 200)))
    path = engine.checkpoint()
    data = path.read_bytes()
    close_all()
    assert vclock_of(path) == VClock({1: 41})
    return data


def _read_checked(data: bytes) -> VClock | None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"{0:020d}{SUFFIX}"
        path.write_bytes(data)
        try:
            vclock = vclock_of(path)
        except CheckpointError as exc:
            assert str(path) in str(exc)
            return None
    assert isinstance(vclock, VClock)
    return vclock


@examples(ci=150, deep=20_000)
def test_a_damaged_checkpoint_gives_its_vclock_or_an_error_naming_it(max_examples: int, checkpoint_bytes: bytes) -> None:
    @fuzz(max_examples)
    @given(steps=byte_mutations, cut=st.none() | st.integers(0, len(checkpoint_bytes)))
    def check(steps: list, cut: int | None) -> None:
        data = mutate_bytes(checkpoint_bytes, steps)
        _read_checked(data if cut is None else data[:cut])

    check()


@pytest.mark.parametrize("content", [b"", b"hello" * 100, b"SQLite format 3\0" + b"\xff" * 84],
                         ids=["empty", "garbage", "header only"])
def test_a_checkpoint_that_is_no_database_is_refused_naming_the_file(content: bytes) -> None:
    """Found by the fuzzer: `vclock_of` raised apsw's NotADBError / SQLError / CorruptError
    (or ValueError for a bad vclock row), naming no file, from inside start or restore."""
    assert _read_checked(content) is None


def test_a_truncated_checkpoint_is_refused_naming_the_file(checkpoint_bytes: bytes) -> None:
    assert _read_checked(checkpoint_bytes[: len(checkpoint_bytes) // 2]) is None
