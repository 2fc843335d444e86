"""The per-connection PRAGMAs applications send, answered as SQLite would.

Drivers and frameworks send a few PRAGMAs on every new connection (`foreign_keys = ON`,
`busy_timeout`, `journal_mode = WAL`, `synchronous = NORMAL`). Every client's statements
run on one writer connection shared by all, so a client cannot set them; but each asks for
what every member runs already, or for what cannot matter here, and is answered exactly as
SQLite answers it, without running; so is a question about what every member fixes
(`PRAGMA foreign_keys`), on a member that takes no writes too. One that would change a
member alone (foreign keys off, another journal mode, another sync level) is refused with
the reason (docs/decisions.md, "Connection PRAGMAs"). Any other PRAGMA that sets something
is the authorizer's to refuse (`statements.py`); one that only asks runs as it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replicaset.storage.errors import SqlError

# PRAGMA [main.]name [= value | (value)], one statement.
_SETTING = re.compile(r"^\s*PRAGMA\s+(?:main\s*\.\s*)?(\w+)\s*(?:=\s*([^;()]+?)|\(\s*([^;()]+?)\s*\))?\s*;?\s*$",
                      re.IGNORECASE)
# What every member runs, asked without a value: answered on a member that takes no
# writes too (read-only, orphan), where a statement of the writer's would be refused.
_FIXED = {"foreign_keys": 1, "journal_mode": "wal", "synchronous": 1}
_TRUE = frozenset({"1", "on", "yes", "true"})
_TEXTS_CACHED = 256


@dataclass(frozen=True, slots=True)
class PragmaAnswer:
    """SQLite's answer to the PRAGMA: its columns and rows (none for most settings)."""

    columns: list[tuple[str, str | None]]
    rows: list[list[Any]]


def _foreign_keys(value: str) -> PragmaAnswer:
    if value in _TRUE:
        return PragmaAnswer(columns=[], rows=[])
    raise SqlError(f"PRAGMA foreign_keys = {value} would change this member alone: every member enforces "
                   "foreign keys, for every client")


def _journal_mode(value: str) -> PragmaAnswer:
    if value == "wal":
        return PragmaAnswer(columns=[("journal_mode", None)], rows=[["wal"]])
    raise SqlError(f"PRAGMA journal_mode = {value} would change this member alone: every member's database runs "
                   "in WAL journal mode")


def _synchronous(value: str) -> PragmaAnswer:
    if value in ("normal", "1"):
        return PragmaAnswer(columns=[], rows=[])
    raise SqlError(f"PRAGMA synchronous = {value} would change this member alone: SQLite runs synchronous = NORMAL "
                   "on every member, and what survives a crash is set by the replica set's own log (wal_mode)")


def _busy_timeout(value: str) -> PragmaAnswer:
    """Any timeout is taken and has nothing to do: clients never wait on SQLite's locks,
    since the server orders every write itself."""
    try:
        milliseconds = int(value)
    except ValueError:
        raise SqlError(f"PRAGMA busy_timeout takes a number of milliseconds, got {value}") from None
    return PragmaAnswer(columns=[("timeout", None)], rows=[[max(milliseconds, 0)]])


_SETTINGS: dict[str, Callable[[str], PragmaAnswer]] = {
    "foreign_keys": _foreign_keys,
    "journal_mode": _journal_mode,
    "synchronous": _synchronous,
    "busy_timeout": _busy_timeout,
}


@functools.lru_cache(maxsize=_TEXTS_CACHED)
def _parse(sql: str) -> tuple[str, str | None] | None:
    """The PRAGMA's name and value (None: it only asks), when it is one of these."""
    match = _SETTING.match(sql)
    if match is None:
        return None
    name, value = match.group(1).lower(), match.group(2) if match.group(2) is not None else match.group(3)
    if value is None:
        return (name, None) if name in _FIXED else None
    return (name, value.strip().strip("'\"").lower()) if name in _SETTINGS else None


def _parsed(sql: str) -> tuple[str, str | None] | None:
    """Every client statement passes here: only a PRAGMA's text is parsed and cached."""
    if sql.lstrip()[:6].upper() != "PRAGMA":
        return None
    return _parse(sql)


def is_connection_pragma(sql: str) -> bool:
    """`sql` is one of the PRAGMAs this module answers."""
    return _parsed(sql) is not None


def connection_pragma(sql: str) -> PragmaAnswer | None:
    """SQLite's answer to `sql` when it is one of these PRAGMAs, None for any other
    statement; SqlError, with the reason, when it would change this member alone."""
    parsed = _parsed(sql)
    if parsed is None:
        return None
    name, value = parsed
    if value is None:
        return PragmaAnswer(columns=[(name, None)], rows=[[_FIXED[name]]])
    return _SETTINGS[name](value)
