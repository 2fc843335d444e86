"""What SQLite keeps per connection and a client reads back with `last_insert_rowid()`,
`changes()` and `total_changes()`, kept per client session instead.

Every session shares the one writer connection, and its reads run on a reader that never
wrote, so SQLite's own functions would answer another client's insert, or 0. The engine
defines functions of the same names on the writer and the reader (an application-defined
function takes the place of SQLite's built-in one) that answer the values of the session
whose statement runs (`Engine.execute` and `Engine.query` take them), which the session
keeps from its own statements' results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import apsw

# The statements after which SQLite's changes() tells their count.
_DML_WORDS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "WITH"})


@dataclass(slots=True)
class ConnectionValues:
    last_insert_rowid: int = 0
    changes: int = 0
    total_changes: int = 0

    def wrote(self, first_word: str, row_count: int | None, inserted_rowid: int | None) -> None:
        """A statement of this session ran: an INSERT moves `last_insert_rowid`, any DML
        statement sets `changes` (DDL and reads leave it, as in SQLite)."""
        if inserted_rowid is not None:
            self.last_insert_rowid = inserted_rowid
        if first_word in _DML_WORDS and row_count is not None:
            self.changes = row_count
            self.total_changes += row_count


def define_functions(conn: apsw.Connection, current: Callable[[], ConnectionValues]) -> None:
    """SQLite's three functions on `conn`, answering `current()`'s values."""
    conn.create_scalar_function("last_insert_rowid", lambda: current().last_insert_rowid, 0)
    conn.create_scalar_function("changes", lambda: current().changes, 0)
    conn.create_scalar_function("total_changes", lambda: current().total_changes, 0)
