"""The iproto wire layer: Tarantool's binary protocol, so Tarantool connectors can talk to us.

Everything but `client` is sans-IO (h11's model): no sockets, no trio, no clocks. The
server runtime owns the connections and feeds received bytes to a `FrameDecoder`, then
writes the bytes the `encode_*` functions return. The public names are re-exported here.
"""

from .auth import CHAP_SHA1, check_scramble, scramble
from .client import Client, SqlResult
from .codec import (
    GREETING_SIZE,
    SALT_SIZE,
    Frame,
    FrameDecoder,
    Greeting,
    decode_greeting,
    encode_error,
    encode_frame,
    encode_greeting,
    encode_ok,
    encode_request,
)
from .constants import (
    ERROR_TYPE_BIT,
    GREETING_VERSION,
    IPROTO_PROTOCOL_VERSION,
    PRIVATE_REQUEST_TYPE_MIN,
    ErrorCode,
    Feature,
    HeaderFlag,
    Key,
    MetaKey,
    RequestType,
    SqlInfoKey,
)
from .errors import LocalProtocolError, RemoteProtocolError, ServerError
from .prepared import (
    STATEMENTS_PER_SESSION_MAX,
    TEXT_BYTES_PER_SESSION_MAX,
    PreparedStatements,
    statement_id,
)
from .sql_wire import (
    BIND_COUNT_MAX,
    bind_metadata,
    decode_binds,
    metadata,
    sql_info,
    sql_type_name,
)
from .system_views import (
    Field,
    SelectRequest,
    Space,
    SystemView,
    build_system_views,
    decode_select,
    select_system_view,
    vindex_tuple,
    vspace_tuple,
)

__all__ = [
    "BIND_COUNT_MAX",
    "CHAP_SHA1",
    "ERROR_TYPE_BIT",
    "GREETING_SIZE",
    "GREETING_VERSION",
    "IPROTO_PROTOCOL_VERSION",
    "PRIVATE_REQUEST_TYPE_MIN",
    "SALT_SIZE",
    "STATEMENTS_PER_SESSION_MAX",
    "TEXT_BYTES_PER_SESSION_MAX",
    "Client",
    "ErrorCode",
    "Feature",
    "Field",
    "Frame",
    "FrameDecoder",
    "Greeting",
    "HeaderFlag",
    "Key",
    "LocalProtocolError",
    "MetaKey",
    "PreparedStatements",
    "RemoteProtocolError",
    "RequestType",
    "SelectRequest",
    "ServerError",
    "Space",
    "SqlInfoKey",
    "SqlResult",
    "SystemView",
    "bind_metadata",
    "build_system_views",
    "check_scramble",
    "decode_binds",
    "decode_greeting",
    "decode_select",
    "encode_error",
    "encode_frame",
    "encode_greeting",
    "encode_ok",
    "encode_request",
    "metadata",
    "scramble",
    "select_system_view",
    "sql_info",
    "sql_type_name",
    "statement_id",
    "vindex_tuple",
    "vspace_tuple",
]
