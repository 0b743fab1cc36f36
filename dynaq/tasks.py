"""Helpers for the background tasks every service owns."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has finished unwinding.

    Awaiting after ``cancel()`` matters: a task's ``finally`` blocks (flushes,
    releases) run before the owner closes what the task uses.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
