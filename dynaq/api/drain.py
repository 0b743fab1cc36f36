"""Draining the HTTP site: stop listening, let requests in progress finish, close.

aiohttp's own shutdown (``AppRunner.cleanup``) first marks every connection
closing, and a connection marked so drops the bytes that arrive on it: a
request whose body was still arriving when the node was told to stop never
got the rest, and was dropped unanswered at the shutdown timeout. So the node
drains in two steps: it stops accepting connections, then waits until no
request is in a handler (each request is counted by the front middleware,
:class:`RequestsInFlight`) or ``timeout_s`` passes; only then does aiohttp
close what is left (idle keep-alive connections, and requests still running
at the timeout).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from dynaq.clock import Clock
from dynaq.tasks import wait_event


class RequestsInFlight:
    """How many requests are inside a handler now (a plain counter: no lock, one loop)."""

    __slots__ = ("_idle", "count")

    def __init__(self) -> None:
        self.count = 0
        self._idle: asyncio.Event | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self, clock: Clock, timeout_s: float) -> bool:
        """Wait until no request is in progress; False if ``timeout_s`` passed first."""
        if self.count == 0:
            return True
        self._idle = idle = asyncio.Event()
        give_up = clock.monotonic() + timeout_s
        while self.count:
            left = give_up - clock.monotonic()
            if left <= 0 or not await wait_event(idle, clock, left):
                return False
            idle.clear()
        return True


IN_FLIGHT = web.AppKey("requests_in_flight", RequestsInFlight)


async def drain(runner: web.AppRunner, clock: Clock, timeout_s: float) -> None:
    """Stop accepting, let requests in progress (bodies still arriving included)
    finish within ``timeout_s``, then close the site."""
    for site in list(runner.sites):
        await site.stop()
    in_flight = runner.app.get(IN_FLIGHT)
    if in_flight is not None:
        await in_flight.wait_idle(clock, timeout_s)
    await runner.cleanup()
