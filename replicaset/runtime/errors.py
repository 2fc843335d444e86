"""The error a request is answered with: an iproto error code and a message for the client,
and the error's custom fields where a peer reads more than the message."""

from __future__ import annotations

from typing import Any


class RequestError(Exception):
    def __init__(self, code: int, message: str, fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields
