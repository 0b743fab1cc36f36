"""A store that fails once, where a test says: the crash windows of batch tracking.

:class:`FaultyStore` wraps a store and counts, per kind of call, the calls
that touch a key under ``prefix`` (batch records by default). The one
:class:`Fault` it is armed with fires at the ``nth`` such call of its kind:

* ``fail``: raise :class:`~dynaq.errors.StorageUnavailable`, nothing applied;
* ``lost``: apply, then raise it (a Cassandra timeout whose write went through);
* ``cancel``: raise :class:`asyncio.CancelledError`, nothing applied (a
  shutdown, a client gone);
* ``cancel_after``: apply, then raise it (a crash right after the write).

With ``crash`` set, a fault that cancels also kills the node: every later call
fails, as a dead node makes no more writes (its in-process cleanup never runs).

It also watches batch headers: :attr:`FaultyStore.flips` counts, per batch,
the writes that turned ``complete`` on, :attr:`FaultyStore.log` records
when the fault fired and when a completion was announced, in order with what
tests append (a listener's ``publish``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from dynaq.core import keys
from dynaq.errors import StorageUnavailable
from dynaq.services.batches import BatchHeader
from dynaq.storage.base import Item, Op, Store

T = TypeVar("T")

KINDS = (
    "get",
    "get_many",
    "put_if_absent",
    "put_if_version",
    "delete",
    "scan",
)
"""The calls batch tracking makes (plain puts, batches and key listings it does not)."""
MODES = ("fail", "lost", "cancel", "cancel_after")
READS = {"get", "get_many", "scan"}


@dataclass(frozen=True)
class Fault:
    kind: str
    nth: int
    mode: str


class FaultyStore(Store):
    """``inner`` with one injected failure (see the module docstring)."""

    def __init__(self, inner: Store, prefix: bytes = b"b/", crash: bool = False) -> None:
        self.inner = inner
        self.prefix = prefix
        self.crash = crash
        self.dead = False
        self.calls: Counter[str] = Counter()
        self.fault: Fault | None = None
        self.fired: Fault | None = None
        self.log: list[str] = []
        self.flips: Counter[int] = Counter()

    async def _run(self, kind: str, touched: Sequence[bytes], op: Callable[[], Awaitable[T]]) -> T:
        if self.dead:
            raise StorageUnavailable("the node is down")
        if not any(k.startswith(self.prefix) for k in touched):
            return await op()
        self.calls[kind] += 1
        f = self.fault
        hit = f is not None and f.kind == kind and f.nth == self.calls[kind]
        if f is not None and hit:
            self.fault, self.fired = None, f
            self.log.append("fault")
            self.dead = self.crash and f.mode.startswith("cancel")
            if f.mode == "fail":
                raise StorageUnavailable(f"injected: {f}")
            if f.mode == "cancel":
                raise asyncio.CancelledError
        result = await op()
        if f is not None and hit:
            if f.mode == "lost":
                raise StorageUnavailable(f"injected after applying: {f}")
            raise asyncio.CancelledError
        return result

    async def get(self, key: bytes) -> Item | None:
        return await self._run("get", [key], lambda: self.inner.get(key))

    async def get_many(self, keys_: Sequence[bytes]) -> list[Item | None]:
        return await self._run("get_many", keys_, lambda: self.inner.get_many(keys_))

    async def put(self, key: bytes, value: bytes) -> int:
        return await self._run("put", [key], lambda: self.inner.put(key, value))

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        return await self._run("put_if_absent", [key], lambda: self.inner.put_if_absent(key, value))

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        async def op() -> int | None:
            old = await self.inner.get(key)
            got = await self.inner.put_if_version(key, value, version)
            if got is not None and old is not None and key.startswith(keys.BATCH_HEADER):
                before, after = BatchHeader.decode(old.value), BatchHeader.decode(value)
                if after.complete and not before.complete:
                    self.flips[keys.batch_id_of_header(key)] += 1
                if after.announced and not before.announced:
                    self.log.append("announced")
            return got

        return await self._run("put_if_version", [key], op)

    async def delete(self, key: bytes) -> bool:
        return await self._run("delete", [key], lambda: self.inner.delete(key))

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        return await self._run(
            "write_batch", [op.key for op in ops], lambda: self.inner.write_batch(ops)
        )

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return await self._run("scan", [start], lambda: self.inner.scan(start, end, limit))

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        return await self._run(
            "list_keys", [prefix], lambda: self.inner.list_keys(prefix, limit, start_after)
        )


def injection_points(calls: Counter[str]) -> list[Fault]:
    """Every fault worth trying after a clean run made ``calls``: each call of each
    kind, failed before it applies, and (for writes) after it applied."""
    out: list[Fault] = []
    for kind in KINDS:
        for nth in range(1, calls[kind] + 1):
            for mode in MODES:
                if kind in READS and mode in ("lost", "cancel_after"):
                    continue  # a read that applied is a read that succeeded
                out.append(Fault(kind, nth, mode))
    return out
