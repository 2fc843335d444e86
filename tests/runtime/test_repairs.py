"""The counts of repairs kept in the data directory (`runtime/repairs.py`)."""

from __future__ import annotations

import pytest

from replicaset.core.anti_entropy import Repair
from replicaset.runtime import repairs


def test_counts_are_read_back_as_written_and_a_missing_file_is_none(tmp_path):
    assert repairs.load(tmp_path) == {}
    repairs.save(tmp_path, {Repair.DELTA: 3, Repair.SNAPSHOT: 0, Repair.GAP: 1})
    assert repairs.load(tmp_path) == {Repair.DELTA: 3, Repair.SNAPSHOT: 0, Repair.GAP: 1}


@pytest.mark.parametrize("text", ["{", "[]", '{"runs": {"gap": -1}}', '{"runs": {"gap": true}}'])
def test_a_damaged_file_is_named(tmp_path, text):
    (tmp_path / repairs.FILE_NAME).write_text(text)
    with pytest.raises(repairs.CountsUnreadable, match=repairs.FILE_NAME):
        repairs.load(tmp_path)
