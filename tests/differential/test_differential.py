"""The same statements on plain SQLite and on a three-member replica set, every answer and
every member's tables compared (issue 36; `kit.py` says how, docs/reliability.md how to add
cases).

Hand-written cases (`cases/*.sql`) go round robin over the members, one statement a step.
Generated cases (`generate.py`) draw the member of each step from their seed and give every
key explicitly; a hand-written file that leaves INTEGER PRIMARY KEYs to the database
(`auto_ids.sql`) names those columns with `-- @keys-differ` and is compared without them,
since the server's ids are cluster-unique, not SQLite's. Non-deterministic functions
(`random()`, `datetime('now')`) appear in no case: their values cannot be compared with
SQLite's. `known_gaps.sql` lists what SQLite takes and the server refuses today.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.iproto.client import Client
from tests.differential.kit import Differential, parse_case
from tests.server.conftest import ReplicaSet

HERE = Path(__file__).parent
CASE_FILES = sorted((HERE / "cases").glob("*.sql"))


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_a_case_file_answers_as_sqlite_on_every_member(members: tuple[ReplicaSet, list[Client]], path: Path) -> None:
    rs, clients = members
    case = parse_case(path)
    Differential(rs, clients).run(case, lambda step: step % len(clients))
