"""A session's prepared statements (iproto PREPARE), kept as Tarantool 2.x keeps them.

Theory of operation: PREPARE with SQL_TEXT registers the text under an id and answers
with it; EXECUTE with STMT_ID runs the text registered under that id; PREPARE with
STMT_ID alone (unprepare) drops it. An id belongs to the session that prepared it, as in
Tarantool: an id this session never prepared, or has dropped, is ER_WRONG_QUERY_ID.
Nothing here compiles or runs SQL: the session compiles a text before registering it,
and runs a registered text through the very path of EXECUTE with SQL_TEXT, so both
answer alike. No sockets, no trio, no clock.

A session holds at most `statements_max` statements of at most `text_bytes_max` bytes of
text together: Tarantool bounds its statement cache (`sql_cache_size`, 5 MiB by default)
and refuses PREPARE past it; so do we, per session, and unprepare makes room.
"""

from __future__ import annotations

import xxhash

from .constants import ErrorCode
from .errors import RemoteProtocolError

#: How many statements one session may hold prepared at once.
STATEMENTS_PER_SESSION_MAX = 1024
#: How many bytes of SQL text one session may hold prepared at once (Tarantool's default
#: `sql_cache_size`, which Tarantool counts for all sessions together).
TEXT_BYTES_PER_SESSION_MAX = 5 * 1024 * 1024

_ID_MODULUS = 1 << 32


def statement_id(sql: str) -> int:
    """The id a text is prepared under: xxHash32 (seed 0) of its UTF-8 bytes.

    Tarantool's id is a 32-bit unsigned hash of the text, so that the same text gets the
    same id and a client may keep ids across its requests; its hash function is its own,
    so our numbers differ from Tarantool's for the same text, which no client can tell.
    """
    return xxhash.xxh32_intdigest(sql.encode("utf-8"))


class PreparedStatements:
    """The statements one session prepared: id -> SQL text, bounded."""

    def __init__(
        self,
        *,
        statements_max: int = STATEMENTS_PER_SESSION_MAX,
        text_bytes_max: int = TEXT_BYTES_PER_SESSION_MAX,
    ) -> None:
        self.statements_max = statements_max
        self.text_bytes_max = text_bytes_max
        self._texts: dict[int, str] = {}
        self._ids: dict[str, int] = {}
        self._text_bytes = 0

    def __len__(self) -> int:
        return len(self._texts)

    def prepare(self, sql: str) -> int:
        """Register `sql` (already compiled by the caller) and return its id.

        A text already registered keeps its id and takes no more room. Two texts of one
        hash: the later takes the next free id, as Tarantool's statement cache does.
        Past either bound, PREPARE is refused (ER_SQL_PREPARE) until an unprepare makes room.
        """
        known = self._ids.get(sql)
        if known is not None:
            return known
        if len(self._texts) >= self.statements_max:
            raise _error(
                f"Failed to prepare SQL statement: this session holds {len(self._texts)} prepared "
                f"statements, the most it may ({self.statements_max}); unprepare one first "
                "(PREPARE with STMT_ID)",
                ErrorCode.SQL_PREPARE,
            )
        size = len(sql.encode("utf-8"))
        if self._text_bytes + size > self.text_bytes_max:
            raise _error(
                f"Failed to prepare SQL statement: this session's prepared statements would "
                f"hold {self._text_bytes + size} bytes of SQL text, more than {self.text_bytes_max}; "
                "unprepare some first (PREPARE with STMT_ID)",
                ErrorCode.SQL_PREPARE,
            )
        stmt_id = statement_id(sql)
        while stmt_id in self._texts:
            stmt_id = (stmt_id + 1) % _ID_MODULUS
        self._texts[stmt_id] = sql
        self._ids[sql] = stmt_id
        self._text_bytes += size
        return stmt_id

    def text(self, stmt_id: object) -> str:
        """The text registered under `stmt_id` (a STMT_ID as it came off the wire)."""
        return self._texts[self._known(stmt_id)]

    def unprepare(self, stmt_id: object) -> None:
        """Drop the statement registered under `stmt_id`; an unknown id is an error, as in
        Tarantool, rather than a silent no-op that would hide a client's bookkeeping bug."""
        sql = self._texts.pop(self._known(stmt_id))
        del self._ids[sql]
        self._text_bytes -= len(sql.encode("utf-8"))

    def check_invariants(self) -> None:
        """Both maps describe the same statements, and the bounds and the byte count hold."""
        assert len(self._texts) == len(self._ids) <= self.statements_max, "id and text maps differ"
        assert all(self._ids[sql] == stmt_id for stmt_id, sql in self._texts.items()), "maps disagree"
        assert all(0 <= stmt_id < _ID_MODULUS for stmt_id in self._texts), "id outside 32 bits"
        assert self._text_bytes == sum(len(sql.encode("utf-8")) for sql in self._texts.values())
        assert self._text_bytes <= self.text_bytes_max, "text bytes over the bound"

    def _known(self, stmt_id: object) -> int:
        if not isinstance(stmt_id, int) or isinstance(stmt_id, bool) or stmt_id < 0:
            raise _error(f"STMT_ID must be an unsigned integer, got {stmt_id!r:.40}", ErrorCode.ILLEGAL_PARAMS)
        if stmt_id not in self._texts:
            raise _error(f"Prepared statement with id {stmt_id} does not exist", ErrorCode.WRONG_QUERY_ID)
        return stmt_id


def _error(message: str, code: ErrorCode) -> RemoteProtocolError:
    return RemoteProtocolError(message, fatal=False, code=code)
