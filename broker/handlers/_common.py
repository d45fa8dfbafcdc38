"""Small helpers shared by handlers."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

NO_THROTTLE = timedelta(0)
OK = ErrorCode.none


def err_message(error: ErrorCode, message: str | None) -> str | None:
    """Only send an error message alongside an error."""
    return message if error != ErrorCode.none else None
