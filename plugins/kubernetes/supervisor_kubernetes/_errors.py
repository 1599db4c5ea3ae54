"""The one exception of the plugin's API calls (no import of the client
needed to catch it: the client is loaded only once the plugin connects)."""

from __future__ import annotations

__all__ = ["APIError"]


class APIError(Exception):
    """The API could not be used: unreachable, refused (401/403), or an
    error status.  ``status`` is the HTTP code, None when no answer came;
    ``dropped``: the connection was closed or reset before any answer."""

    def __init__(self, message: str, status: int | None = None, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.dropped = dropped
