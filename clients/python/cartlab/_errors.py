"""cartlab's exceptions: what cartd refused, with its gRPC code and message, as the CLI prints them."""

from __future__ import annotations


class CartError(Exception):
    """cartd refused a call, or could not be reached.

    `code` is the gRPC status code's name ("NOT_FOUND", "INVALID_ARGUMENT", "FAILED_PRECONDITION",
    "UNAVAILABLE", ...); `message` is cartd's text, which names the problem (file, line, key,
    allowed values)."""

    def __init__(self, code: str, message: str, call: str = ""):
        self.code = code
        self.message = message
        self.call = call
        super().__init__(f"{call + ': ' if call else ''}{message} ({code})")


class ConfigError(ValueError):
    """The client config (file, environment, arguments) is malformed."""
