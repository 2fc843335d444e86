"""The system views connectors read at connect, answered in Tarantool 2.6's tuple shapes.

Why this exists: a Tarantool connector loads the schema before anything else and gives up
when a view it reads is refused. Tarantool's own `net.box` (2.6) sends, right after the
greeting (after AUTH when it has a user), three SELECTs with ITER_ALL, an empty key and
limit 0xFFFFFFFF: `_vspace` (281), `_vindex` (289) and `_vcollation` (277), and sends them
again whenever a reply carries a new schema version. The PyPI `tarantool` connector reads
`_vspace` and `_vindex`, all rows or one space by id or name (EQ on index 0 or 2). Both
read rows by position, so field order, field types and index numbers are Tarantool's.

Theory of operation: the node describes its SQL tables and views as `Space`s
(`replicaset.runtime.spaces`); `build_system_views`
turns them into every view's rows once per schema version. A SELECT body is decoded and
checked once, at the edge, into a `SelectRequest` (`decode_select`); `select_system_view`
answers it from those rows as a Tarantool tree index would for EQ, and for ALL without a
key, and refuses anything else with Tarantool's error code. Nothing here touches the
database or a socket.

`_vcollation` lists nothing: our tables compare text with SQLite's collations, not with
Tarantool's ICU ones, and no field or index part we list names a collation id, so no
client ever has one to look up there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .constants import ErrorCode, Key
from .errors import RemoteProtocolError

_ADMIN_USER_ID = 1  # owner of every space, as `admin` owns SQL tables in Tarantool
_ENGINE = "memtx"  # what connectors expect of an SQL table's space
_INDEX_TYPE = "tree"
_PRIMARY_KEY_NAME = "pk"
_LIMIT_DEFAULT = 0xFFFFFFFF  # Tarantool's "no limit", which both connectors send


class SystemView(IntEnum):
    """The views answered, by Tarantool's space ids."""

    VCOLLATION = 277
    VSPACE = 281
    VINDEX = 289

    @property
    def space_name(self) -> str:
        return f"_{self.name.lower()}"


class Iterator(IntEnum):
    """The iterator types served: those connectors use on these views."""

    EQ = 0
    ALL = 2


# Each view's indexes as Tarantool 2.6 defines them: index id -> (field number, field
# type) of each part. `_vindex` has no index 1 in Tarantool either.
_VIEW_INDEXES: dict[SystemView, dict[int, tuple[tuple[int, str], ...]]] = {
    SystemView.VCOLLATION: {0: ((0, "unsigned"),), 1: ((1, "string"),)},
    SystemView.VSPACE: {0: ((0, "unsigned"),), 1: ((1, "unsigned"),), 2: ((2, "string"),)},
    SystemView.VINDEX: {0: ((0, "unsigned"), (1, "unsigned")), 2: ((0, "unsigned"), (2, "string"))},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """One field of a space's format. `type` is a Tarantool field type name."""

    name: str
    type: str
    is_nullable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Space:
    """An SQL table or view as a Tarantool space. `primary_key` holds 0-based field
    numbers; a space without one (a view, a local table without a key) gets no index row
    at all, rather than one that names a key it does not have. `flags` is `_vspace`'s
    options map, as Tarantool fills it (`{"view": true, "sql": ...}` for a view,
    `{"group_id": 1}` for a local space)."""

    id: int
    name: str
    fields: tuple[Field, ...]
    primary_key: tuple[int, ...]
    flags: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class SelectRequest:
    """A SELECT body, checked: what `select_system_view` needs and nothing else."""

    space_id: int
    index_id: int
    key: tuple[Any, ...]
    iterator: int
    offset: int
    limit: int


def vspace_tuple(
    space_id: int, name: str, fields: Sequence[Field], flags: Mapping[str, Any] | None = None
) -> list[Any]:
    """A `_vspace` row: [id, owner, name, engine, field_count, flags, format].

    `format` is a list of maps with "name", "type" and "is_nullable", as Tarantool lists
    an SQL table's columns; net.box builds a tuple format from it, the PyPI connector
    reads "name" and "type". field_count 0 means "not fixed".
    """
    field_format = [{"name": f.name, "type": f.type, "is_nullable": f.is_nullable} for f in fields]
    return [space_id, _ADMIN_USER_ID, name, _ENGINE, 0, dict(flags or {}), field_format]


def vindex_tuple(
    space_id: int,
    index_id: int,
    name: str,
    fields: Sequence[Field],
    key_fields: Sequence[int],
    *,
    unique: bool = True,
) -> list[Any]:
    """A `_vindex` row: [space id, index id, name, type, options, parts].

    Each part is Tarantool 2.x's map with "field" (0-based), "type" and "is_nullable",
    taken from `fields` so an index can never disagree with its space's format. Index 0
    is the primary key, which must be unique.
    """
    parts = [
        {"field": number, "type": fields[number].type, "is_nullable": fields[number].is_nullable}
        for number in key_fields
    ]
    return [space_id, index_id, name, _INDEX_TYPE, {"unique": unique}, parts]


def build_system_views(spaces: Iterable[Space]) -> dict[SystemView, list[list[Any]]]:
    """Every view's rows, ordered by the view's primary key as Tarantool returns them."""
    ordered = sorted(spaces, key=lambda space: space.id)
    return {
        SystemView.VSPACE: [vspace_tuple(s.id, s.name, s.fields, s.flags) for s in ordered],
        SystemView.VINDEX: [
            vindex_tuple(s.id, 0, _PRIMARY_KEY_NAME, s.fields, s.primary_key)
            for s in ordered
            if s.primary_key
        ],
        SystemView.VCOLLATION: [],
    }


def decode_select(body: Mapping[int, Any]) -> SelectRequest:
    """Check a SELECT body's fields and fill Tarantool's defaults for the missing ones.

    Raises a non-fatal `RemoteProtocolError` naming the field that is wrong.
    """
    key = body.get(Key.KEY, [])
    if not isinstance(key, list):
        raise _select_error("SELECT KEY must be an array", ErrorCode.ILLEGAL_PARAMS)
    return SelectRequest(
        space_id=_unsigned(body, Key.SPACE_ID, None),
        index_id=_unsigned(body, Key.INDEX_ID, 0),
        key=tuple(key),
        iterator=_unsigned(body, Key.ITERATOR, Iterator.EQ),
        offset=_unsigned(body, Key.OFFSET, 0),
        limit=_unsigned(body, Key.LIMIT, _LIMIT_DEFAULT),
    )


def select_system_view(
    views: Mapping[SystemView, Sequence[list[Any]]], request: SelectRequest
) -> list[list[Any]]:
    """The rows of a system view a SELECT asks for, as Tarantool would return them.

    A space that is not one of `views` is refused (UNSUPPORTED): data lives in SQL tables,
    which a client reads with EXECUTE.
    """
    if request.space_id not in views:
        answered = ", ".join(f"{v.space_name} ({v.value})" for v in sorted(views))
        raise _select_error(
            f"SELECT on space {request.space_id} is not supported: this server answers only "
            f"the system views {answered}; read data with SQL (EXECUTE)",
            ErrorCode.UNSUPPORTED,
        )
    view = SystemView(request.space_id)
    parts = _VIEW_INDEXES[view].get(request.index_id)
    if parts is None:
        raise _select_error(
            f"No index #{request.index_id} is defined in space '{view.space_name}'",
            ErrorCode.NO_SUCH_INDEX_ID,
        )
    if request.iterator not in (Iterator.EQ, Iterator.ALL):
        raise _select_error(
            f"SELECT on {view.space_name} supports iterators EQ (0) and ALL (2), not {request.iterator}",
            ErrorCode.UNSUPPORTED,
        )
    if request.iterator == Iterator.ALL and request.key:
        raise _select_error(
            f"SELECT on {view.space_name} with iterator ALL takes an empty key; use EQ to look up a key",
            ErrorCode.UNSUPPORTED,
        )
    _check_key(request.key, parts)
    key_fields = [number for number, _ in parts[: len(request.key)]]
    rows = sorted(views[view], key=lambda row: [row[number] for number, _ in parts])
    matching = [row for row in rows if [row[n] for n in key_fields] == list(request.key)]
    return matching[request.offset : request.offset + request.limit]


def _check_key(key: tuple[Any, ...], parts: tuple[tuple[int, str], ...]) -> None:
    """Tarantool's checks: no more key parts than the index has, each of its part's type.
    They also keep Python from matching True to 1."""
    if len(key) > len(parts):
        raise _select_error(
            f"Invalid key part count (expected [0..{len(parts)}], got {len(key)})",
            ErrorCode.KEY_PART_COUNT,
        )
    for number, (value, (_, field_type)) in enumerate(zip(key, parts)):
        fits = isinstance(value, str) if field_type == "string" else _is_unsigned(value)
        if not fits:
            raise _select_error(
                f"Supplied key type of part {number} does not match index part type: expected {field_type}",
                ErrorCode.KEY_PART_TYPE,
            )


def _unsigned(body: Mapping[int, Any], key: Key, default: int | None) -> int:
    value = body.get(key, default)
    if value is None:
        raise _select_error(f"Missing mandatory field '{key.name}' in request", ErrorCode.MISSING_REQUEST_FIELD)
    if not _is_unsigned(value):
        raise _select_error(f"SELECT {key.name} must be an unsigned integer", ErrorCode.ILLEGAL_PARAMS)
    return value


def _is_unsigned(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _select_error(message: str, code: ErrorCode) -> RemoteProtocolError:
    return RemoteProtocolError(message, fatal=False, code=code)
