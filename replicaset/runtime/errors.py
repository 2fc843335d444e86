"""The error a request is answered with: an iproto error code and a message for the client."""

from __future__ import annotations


class RequestError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
