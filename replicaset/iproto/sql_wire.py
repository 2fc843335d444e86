"""How SQL requests and results look on the wire.

Everything here mirrors what Tarantool 2.10 sends or accepts, because connectors were
written against it: EXECUTE replies carry METADATA + DATA for queries and SQL_INFO for
changes; binds arrive as a list of values and/or one-entry maps. The schema rows
connectors read live in `system_views`.
"""

from collections.abc import Sequence
from typing import Any

from .constants import ErrorCode, MetaKey, SqlInfoKey
from .errors import RemoteProtocolError

#: Tarantool's own limit on bind parameters (SQL_BIND_PARAMETER_MAX).
BIND_COUNT_MAX = 65000

_FIELD_NAME = int(MetaKey.FIELD_NAME)
_TYPE = int(MetaKey.TYPE)
_ROW_COUNT = int(SqlInfoKey.ROW_COUNT)
_AUTOINCREMENT_IDS = int(SqlInfoKey.AUTOINCREMENT_IDS)

# Tarantool names a bound parameter ":name", "@name" or "$name"; SQLite (and so apsw's
# dict bindings) looks the name up without that first character.
_BIND_NAME_PREFIXES = (":", "@", "$")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_SCALAR_TYPES = (type(None), bool, int, float, str, bytes)


def metadata(columns: Sequence[tuple[str, str]]) -> list[dict[int, str]]:
    """METADATA of an EXECUTE reply from (column name, Tarantool type name) pairs."""
    return [{_FIELD_NAME: name, _TYPE: type_name} for name, type_name in columns]


def bind_metadata(parameters: Sequence[str]) -> list[dict[int, str]]:
    """BIND_METADATA of a PREPARE reply from the parameters' names ("?", ":name").

    Each is typed "ANY", as Tarantool types parameters: a parameter has no type until a
    value is bound to it.
    """
    return metadata([(name, "ANY") for name in parameters])


def sql_info(row_count: int, autoincrement_ids: Sequence[int]) -> dict[int, Any]:
    """SQL_INFO of an EXECUTE reply for a statement that changed rows.

    AUTOINCREMENT_IDS is left out when empty, as Tarantool does; connectors then report None.
    """
    info: dict[int, Any] = {_ROW_COUNT: row_count}
    if autoincrement_ids:
        info[_AUTOINCREMENT_IDS] = list(autoincrement_ids)
    return info


def sql_type_name(declared_type: str | None) -> str:
    """Tarantool's SQL type name for a SQLite column, by SQLite's own affinity rules.

    A column without a declared type (an expression, or a column declared without one) is
    "any": SQLite itself attaches no type to it.
    """
    if not declared_type:
        return "any"
    upper = declared_type.upper()
    if "INT" in upper:
        return "integer"
    if "CHAR" in upper or "CLOB" in upper or "TEXT" in upper:
        return "string"
    if "BLOB" in upper:
        return "varbinary"
    if "REAL" in upper or "FLOA" in upper or "DOUB" in upper:
        return "double"
    if "BOOL" in upper:
        return "boolean"
    return "number"


def decode_binds(value: object) -> list[Any] | dict[str, Any]:
    """SQL_BIND as apsw wants it: a list for positional binds, a dict for named ones.

    Connectors send positional values as they are and each named one as `{":name": value}`
    (PyPI `tarantool` turns a dict of params into such a list). apsw binds either a sequence
    or a mapping, so a list mixing both kinds is refused, as are values SQLite cannot store
    (arrays, maps, msgpack extensions, integers outside int64). Errors are not fatal: the
    caller answers the request with `exc.code`; `sync` is left None for the caller to fill.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bind_error("SQL_BIND must be an array", ErrorCode.INVALID_MSGPACK)
    if len(value) > BIND_COUNT_MAX:
        raise _bind_error(
            f"SQL bind parameter limit reached: {BIND_COUNT_MAX}",
            ErrorCode.SQL_BIND_PARAMETER_MAX,
        )
    positional: list[Any] = []
    named: dict[str, Any] = {}
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            positional.append(_check_bind_value(item, str(number)))
            continue
        if len(item) != 1:
            raise _bind_error(
                f"bind parameter {number} must be a value or a map of one name to a value",
                ErrorCode.INVALID_MSGPACK,
            )
        ((name, bind_value),) = item.items()
        if not isinstance(name, str):
            raise _bind_error(
                f"bind parameter {number} has a name that is not a string",
                ErrorCode.INVALID_MSGPACK,
            )
        bare_name = name[1:] if name.startswith(_BIND_NAME_PREFIXES) else name
        if not bare_name:
            raise _bind_error(
                f"bind parameter {number} has an empty name", ErrorCode.ILLEGAL_PARAMS
            )
        if bare_name in named:
            raise _bind_error(f"bind parameter {name} is given twice", ErrorCode.ILLEGAL_PARAMS)
        named[bare_name] = _check_bind_value(bind_value, name)
    if positional and named:
        raise _bind_error(
            "mixing positional and named bind parameters is not supported",
            ErrorCode.ILLEGAL_PARAMS,
        )
    return named if named else positional


def _check_bind_value(value: Any, parameter: str) -> Any:
    if not isinstance(value, _SCALAR_TYPES):
        kind = {list: "ARRAY", dict: "MAP"}.get(type(value), "EXTENSION")
        raise _bind_error(
            f"Bind value type {kind} for parameter {parameter} is not supported",
            ErrorCode.SQL_BIND_TYPE,
        )
    if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
        raise _bind_error(
            f"Bind value for parameter {parameter} is out of the 64-bit signed integer range",
            ErrorCode.SQL_BIND_TYPE,
        )
    return value


def _bind_error(message: str, code: ErrorCode) -> RemoteProtocolError:
    return RemoteProtocolError(message, fatal=False, code=code)

