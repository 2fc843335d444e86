"""The error types of the iproto layer.

Who is at fault decides what happens next, so each fault has its own type (as in h11):
`RemoteProtocolError` when the peer sent bytes we cannot accept (the caller answers with an
error reply or closes that one connection), `LocalProtocolError` when our own code misused
this API (a bug to fix, never something a peer can trigger), and `ServerError` when a
well-formed reply says the request failed.
"""

from .constants import ErrorCode


class RemoteProtocolError(Exception):
    """The peer sent something that is not valid iproto.

    `fatal` says whether the byte stream can still be trusted. False: the frame's boundary
    is known and the bad frame has been skipped, so the caller answers it with an error
    reply (to `sync` when it could be read, else 0) and keeps the connection. True: framing
    is lost (bad length prefix, oversize frame, broken greeting), so the caller closes the
    connection. `code` is the Tarantool error code to put in that reply.
    """

    def __init__(
        self,
        message: str,
        *,
        fatal: bool,
        sync: int | None = None,
        code: int = ErrorCode.INVALID_MSGPACK,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fatal = fatal
        self.sync = sync
        self.code = code


class LocalProtocolError(Exception):
    """Our code misused the iproto API (for example encoded a value msgpack cannot carry)."""


class ServerError(Exception):
    """The server answered a request with an error reply (`code` is Tarantool's number)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} (error {self.code})"
