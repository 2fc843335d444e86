"""Numeric vocabulary of Tarantool's iproto protocol, as far as this server speaks it.

The numbers are Tarantool's own (`src/box/iproto_constants.h`, `src/box/errcode.h`,
`src/box/iproto_features.h`) because existing Tarantool connectors hard-code them: a
connector only understands our replies if every key, request type and error code means
what it means to a real Tarantool.
"""

from enum import IntEnum, IntFlag

#: Version put in the greeting. 2.10.0 is the first release whose greeting makes connectors
#: send the ID request (PyPI `tarantool` checks `version >= 2.10.0`) and the release that
#: introduced streams and interactive transactions over iproto, which we serve.
GREETING_VERSION = "2.10.0"

#: Protocol version Tarantool 2.10 answers ID with; it goes with `Feature` 0..3.
IPROTO_PROTOCOL_VERSION = 3

#: Request types from here up to (not including) the error bit are ours: messages between
#: replica-set peers that Tarantool has no code for (2PC prepare/commit/abort, SWIM,
#: anti-entropy). Tarantool's own types stay far below.
PRIVATE_REQUEST_TYPE_MIN = 0x2000

#: A reply's REQUEST_TYPE is `ERROR_TYPE_BIT | ErrorCode` when the request failed.
ERROR_TYPE_BIT = 0x8000


class Key(IntEnum):
    """Keys of the header map (below 0x10) and of the body map (0x10 and up)."""

    REQUEST_TYPE = 0x00
    SYNC = 0x01
    REPLICA_ID = 0x02
    LSN = 0x03
    TIMESTAMP = 0x04
    SCHEMA_VERSION = 0x05
    GROUP_ID = 0x07
    TSN = 0x08
    FLAGS = 0x09
    STREAM_ID = 0x0A

    SPACE_ID = 0x10
    INDEX_ID = 0x11
    LIMIT = 0x12
    OFFSET = 0x13
    ITERATOR = 0x14
    KEY = 0x20
    TUPLE = 0x21
    FUNCTION_NAME = 0x22
    USER_NAME = 0x23
    INSTANCE_UUID = 0x24
    REPLICASET_UUID = 0x25
    VCLOCK = 0x26
    EXPR = 0x27
    OPS = 0x28
    BALLOT = 0x29
    OPTIONS = 0x2B
    DATA = 0x30
    ERROR_24 = 0x31
    METADATA = 0x32
    BIND_METADATA = 0x33
    BIND_COUNT = 0x34
    SQL_TEXT = 0x40
    SQL_BIND = 0x41
    SQL_INFO = 0x42
    STMT_ID = 0x43
    REPLICA_ANON = 0x50
    ID_FILTER = 0x51
    ERROR = 0x52
    TERM = 0x53
    VERSION = 0x54
    FEATURES = 0x55
    TIMEOUT = 0x56
    TXN_ISOLATION = 0x59
    VCLOCK_SYNC = 0x5A
    AUTH_TYPE = 0x5B
    IS_SYNC = 0x61


class HeaderFlag(IntFlag):
    """Bits of the FLAGS header key, set on WAL rows of synchronous transactions."""

    COMMIT = 0x01
    WAIT_SYNC = 0x02
    WAIT_ACK = 0x04


class RequestType(IntEnum):
    """REQUEST_TYPE values of requests and of successful replies (OK, CHUNK)."""

    OK = 0
    SELECT = 1
    INSERT = 2
    REPLACE = 3
    UPDATE = 4
    DELETE = 5
    CALL_16 = 6
    AUTH = 7
    EVAL = 8
    UPSERT = 9
    CALL = 10
    EXECUTE = 11
    NOP = 12
    PREPARE = 13
    BEGIN = 14
    COMMIT = 15
    ROLLBACK = 16
    RAFT = 30
    PROMOTE = 31
    DEMOTE = 32
    CONFIRM = 40
    RAFT_ROLLBACK = 41
    PING = 64
    JOIN = 65
    SUBSCRIBE = 66
    VOTE = 68
    FETCH_SNAPSHOT = 69
    REGISTER = 70
    JOIN_META = 71
    JOIN_SNAPSHOT = 72
    ID = 73
    WATCH = 74
    UNWATCH = 75
    EVENT = 76
    WATCH_ONCE = 77
    CHUNK = 128


class MetaKey(IntEnum):
    """Keys of one column description in an EXECUTE reply's METADATA list."""

    FIELD_NAME = 0
    TYPE = 1
    COLL = 2
    IS_NULLABLE = 3
    IS_AUTOINCREMENT = 4
    SPAN = 5


class SqlInfoKey(IntEnum):
    """Keys of the SQL_INFO map an EXECUTE reply carries for statements that change rows."""

    ROW_COUNT = 0
    AUTOINCREMENT_IDS = 1


class Feature(IntEnum):
    """Protocol feature ids exchanged in the ID request and reply."""

    STREAMS = 0
    TRANSACTIONS = 1
    ERROR_EXTENSION = 2
    WATCHERS = 3


class ErrorCode(IntEnum):
    """Tarantool's error codes (`box.error`), for the errors this server reports.

    Connectors act on some of them: PyPI `tarantool` tolerates UNKNOWN_REQUEST_TYPE in reply
    to ID, falls back to `_space` on NO_SUCH_SPACE for `_vspace`, and reloads its schema on
    WRONG_SCHEMA_VERSION.
    """

    UNKNOWN = 0
    ILLEGAL_PARAMS = 1
    TUPLE_FOUND = 3
    UNSUPPORTED = 5
    READONLY = 7
    KEY_PART_TYPE = 18
    INVALID_MSGPACK = 20
    KEY_PART_COUNT = 31
    NO_SUCH_PROC = 33
    NO_SUCH_INDEX_ID = 35
    NO_SUCH_SPACE = 36
    WAL_IO = 40
    ACCESS_DENIED = 42
    NO_SUCH_USER = 45
    CREDS_MISMATCH = 47
    UNKNOWN_REQUEST_TYPE = 48
    RELOAD_CFG = 58
    CFG = 59
    UNKNOWN_REPLICA = 62
    REPLICASET_UUID_MISMATCH = 63
    INSTANCE_UUID_MISMATCH = 66
    MISSING_REQUEST_FIELD = 69
    NO_CONNECTION = 77
    TIMEOUT = 78
    ACTIVE_TRANSACTION = 79
    SESSION_CLOSED = 86
    TRANSACTION_CONFLICT = 97
    PROTOCOL = 104
    WRONG_SCHEMA_VERSION = 109
    MEMTX_MAX_TUPLE_SIZE = 110
    NO_TRANSACTION = 114
    SYSTEM = 115
    LOADING = 116
    CONNECTION_TO_SELF = 117
    CASCADE_ROLLBACK = 134
    SQL_BIND_TYPE = 157
    SQL_BIND_PARAMETER_MAX = 158
    SQL_EXECUTE = 159
    SQL_BIND_NOT_FOUND = 161
    SQL_STATEMENT_EMPTY = 182
    SQL_PARSER_GENERIC = 186
    SQL_PREPARE = 210
    WRONG_QUERY_ID = 211
    SYNC_QUORUM_TIMEOUT = 216
    SYNC_ROLLBACK = 217
    XLOG_GAP = 219
    QUORUM_WAIT = 222
    TXN_ROLLBACK = 225
    NOT_LEADER = 226
    UNABLE_TO_PROCESS_IN_STREAM = 229
    UNABLE_TO_PROCESS_OUT_OF_STREAM = 230
    TRANSACTION_TIMEOUT = 231
    SPLIT_BRAIN = 244
    UNKNOWN_AUTH_METHOD = 249
    AUTH_REQUIRED = 258
    SHUTDOWN = 279
