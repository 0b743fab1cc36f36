"""The root of dynaq's exception tree (drawn in :mod:`dynaq.errors`)."""

from __future__ import annotations

from typing import Any


class DynaqError(Exception):
    """Root of every error dynaq raises deliberately."""

    status: int = 500
    code: str = "internal"
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, Any]:
        """Members the error body carries besides ``error`` and ``code`` (none here)."""
        return {}
