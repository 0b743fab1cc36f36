"""The stream service: the catalog of streams on this node, group commit, publisher
leases, listeners and deletion.

Guarantees:

- **Durable before acknowledged.** :meth:`StreamService.append` returns only after
  its entries are written and fsync'd. Appends are handed to one I/O thread;
  while it commits a group, new appends queue up and go together in the next
  group, so many concurrent appends share one fsync (group commit:
  :mod:`dynaq.streams.committer`).
- **All or nothing per request**, and in order: an append whose entries fail the
  schema (422) or whose order keys decrease (409) writes nothing; indexes are
  dense, 0-based and assigned in commit order.
- **Listeners read only what is durable**, each from its own cursor on a reader
  thread: a slow listener falls behind, nobody waits for it.
- **Fencing**: while a publisher lease is held, only its token appends; a lease
  that expired, or was taken over, fences its holder out. Tokens grow across
  restarts (the last one is stored with the stream).
- **Deletion waits for listeners**: they are told to stop, and until they have
  (or ``delete_wait_s`` passed) the stream answers 503 ``stream_deleting``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import shutil
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaq.clock import Clock
from dynaq.config.sections import StreamsConfig
from dynaq.errors import (
    DynaqError,
    InvalidInput,
    InvalidName,
    PublisherFenced,
    StreamDeleting,
    StreamNotFound,
    StreamUnavailable,
    SubscriptionNotFound,
)
from dynaq.streams.commits import AppendJob
from dynaq.streams.committer import GroupCommit
from dynaq.streams.leases import PublisherLease
from dynaq.streams.listen import Chunk, Cursor, Stops
from dynaq.streams.schema import EntryType
from dynaq.streams.stream import META, Staged, Stream
from dynaq.streams.subscriptions import Start, Subscription, follow, start_at

log = logging.getLogger(__name__)
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,79}")
"""Stream names: like queue names, 1-80 of letters, digits, ``_``, ``-``, ``.``."""


@dataclass
class _Runtime:
    """What the event loop keeps per stream beside its files."""

    lease: PublisherLease = field(default_factory=PublisherLease)
    subscribers: dict[str, Subscription] = field(default_factory=dict)
    deleting: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class StreamInfo:
    name: str
    order_key: str | None
    signature: str
    size: int
    first_index: int
    segments: int
    schema: dict[str, Any]
    fsyncs: int
    last_order: int = -1
    """The order key of the last durable entry (-1: none)."""


class StreamService:
    """Every stream under ``root`` (``<data.dir>/streams``)."""

    def __init__(self, root: Path, config: StreamsConfig, clock: Clock) -> None:
        self.root = root
        self.config = config
        self.clock = clock
        self._streams: dict[str, Stream] = {}
        self._runtime: dict[str, _Runtime] = {}
        self._broken: dict[str, str] = {}
        self._io = ThreadPoolExecutor(1, thread_name_prefix="dynaq-streams-io")
        self._read = ThreadPoolExecutor(config.read_threads, thread_name_prefix="dynaq-streams-rd")
        self._commits = GroupCommit(self._io, clock, self._admit, self._wake_listeners)
        self._declare_lock = asyncio.Lock()

    async def _in_io(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    # -- life cycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Open every stream; one that refuses (signature mismatch, corrupt file) is
        logged as an error and answers 503 until fixed; the others serve."""
        await self._in_io(lambda: self.root.mkdir(parents=True, exist_ok=True))
        names = await self._in_io(
            lambda: sorted(p.name for p in self.root.iterdir() if (p / META).is_file())
        )
        for name in names:
            meta_path = self.root / name / META
            try:
                meta = json.loads(await self._in_io(meta_path.read_bytes))
                stream = Stream(self.root / name, name, meta, self.config)
                cut = await self._in_io(stream.io_open, self.clock.wall_ms())
            except (DynaqError, OSError, ValueError, KeyError) as exc:
                self._broken[name] = str(exc)
                # Loud, but no traceback: the message says which file and why.
                log.error(  # noqa: TRY400
                    "stream refuses to open", extra={"stream": name, "error": str(exc)}
                )
                continue
            if cut:
                log.warning("stream torn tail truncated", extra={"stream": name, "bytes": cut})
            self._streams[name] = stream
            self._runtime[name] = _Runtime()
        self._commits.start()

    def stop_listeners(self) -> None:
        """End every listener (before the HTTP site drains: they would never end)."""
        for rt in self._runtime.values():
            for sub in list(rt.subscribers.values()):
                sub.stop()

    async def close(self) -> None:
        """Stop listeners, commit what is queued, close the files."""
        self.stop_listeners()
        await self._commits.stop()
        for stream in self._streams.values():
            await self._in_io(stream.io_close)
        await asyncio.to_thread(self._io.shutdown, wait=True)
        await asyncio.to_thread(self._read.shutdown, wait=True)

    # -- catalog -----------------------------------------------------------------

    def _get(self, name: str) -> tuple[Stream, _Runtime]:
        if name in self._broken:
            raise StreamUnavailable(self._broken[name])
        stream = self._streams.get(name)
        if stream is None:
            raise StreamNotFound(f"stream {name!r} does not exist")
        rt = self._runtime[name]
        if rt.deleting:
            raise StreamDeleting(f"stream {name!r} is being deleted; its listeners are finishing")
        return stream, rt

    async def declare(
        self,
        name: str,
        schema: Any,
        order_key: Any,
        retention: dict[str, float] | None = None,
    ) -> tuple[bool, bool]:
        """Declare a stream; return (created, extended). The same declaration again is a
        no-op; one with more ``oneOf`` variants extends it; anything else is a 409.
        ``retention`` (``max_bytes``, ``max_age_s``; see :mod:`dynaq.streams.retention`)
        replaces the stream's own limits when given; ``None`` leaves them."""
        if not NAME_PATTERN.fullmatch(name):
            raise InvalidName(
                f"invalid stream name {name!r}: 1-80 of letters, digits, '_', '-', '.'"
            )
        new = EntryType.declare(schema, order_key)
        async with self._declare_lock:
            if name in self._streams or name in self._broken:
                stream, _ = self._get(name)
                if retention is not None and retention != stream.retention:
                    await self._in_io(stream.io_set_retention, retention, self.clock.wall_ms())
                if not stream.type.extended_by(new):
                    return False, False
                await self._in_io(stream.io_extend, new)
                return False, True
            now = self.clock.wall_ms()
            meta = {
                "name": name,
                "schema": new.schema,
                "order_key": new.order_key,
                "signature": new.signature,
                "signatures": [new.signature],
                "publisher_token": 0,
                "created_ms": now,
                "retention": retention or {},
            }
            stream = Stream(self.root / name, name, meta, self.config)

            def create() -> None:
                stream.directory.mkdir(parents=True, exist_ok=True)
                stream.io_write_meta()
                stream.io_open(now)

            await self._in_io(create)
            self._streams[name] = stream
            self._runtime[name] = _Runtime()
            return True, False

    def retention(self, name: str) -> dict[str, float]:
        """The stream's own retention limits (``{}``: the node's apply)."""
        stream, _ = self._get(name)
        return dict(stream.retention)

    def info(self, name: str) -> StreamInfo:
        stream, _ = self._get(name)
        segments, size = stream.snapshot()
        t = stream.type
        first = segments[0].first_index
        return StreamInfo(
            name,
            t.order_key,
            t.signature,
            size,
            first,
            len(segments),
            t.schema,
            stream.fsyncs,
            stream.last_order,
        )

    def names(self) -> list[str]:
        return sorted(n for n, rt in self._runtime.items() if not rt.deleting)

    async def delete(self, name: str) -> None:
        """Tell listeners to stop, wait for them (503 for everyone meanwhile), remove
        the files."""
        stream, rt = self._get(name)
        rt.deleting = True
        for sub in list(rt.subscribers.values()):
            sub.stop()
        if rt.subscribers:
            try:
                async with asyncio.timeout(self.config.delete_wait_s):
                    await rt.idle.wait()
            except TimeoutError:
                log.warning("stream deleted with listeners still writing", extra={"stream": name})

        def remove() -> None:
            stream.io_close()
            shutil.rmtree(stream.directory, ignore_errors=True)

        await self._in_io(remove)
        del self._streams[name]
        del self._runtime[name]

    # -- publishing --------------------------------------------------------------

    async def append(
        self, name: str, entries: list[Any], token: int | None, expect: int | None = None
    ) -> Staged:
        """Append ``entries`` durably (see the module's guarantees). With ``expect``, a
        conditional append: written only if the first entry gets index ``expect``
        (the stream holds exactly ``expect`` entries at commit), else
        :class:`~dynaq.errors.IndexTaken` and nothing is written."""
        stream, rt = self._get(name)
        if not entries:
            raise InvalidInput("entries must hold at least one entry")
        self._check_publisher(rt, token)
        future: asyncio.Future[Staged] = asyncio.get_running_loop().create_future()
        return await self._commits.submit(AppendJob(stream, entries, token, future, expect=expect))

    async def replicate(self, name: str, first_index: int, entries: list[Any]) -> Staged:
        """Append entries copied from the stream's authority at exactly ``first_index``
        (durable before it returns, like :meth:`append`); :class:`ReplicaOutOfStep` if
        this copy's size is not ``first_index``. Entries are validated again: a copy
        never holds what its schema refuses."""
        stream, _ = self._get(name)
        future: asyncio.Future[Staged] = asyncio.get_running_loop().create_future()
        job = AppendJob(stream, entries, None, future, expect=first_index, replica=True)
        return await self._commits.submit(job)

    def epoch(self, name: str) -> int:
        """The authority epoch this node's copy of ``name`` was last written under."""
        stream, _ = self._get(name)
        return stream.epoch

    async def set_epoch(self, name: str, epoch: int, *, authority: bool) -> None:
        """This copy is written under ``epoch`` from now on. As the ``authority`` of a
        new epoch, publisher tokens start above every earlier epoch's (``epoch << 32``),
        so a publisher fenced before a failover stays fenced after it."""
        stream, _ = self._get(name)

        def write() -> None:
            stream.epoch = epoch
            if authority:
                stream.publisher_token = max(stream.publisher_token, epoch << 32)
            stream.io_write_meta()

        await self._in_io(write)

    async def truncate(self, name: str, size: int) -> int:
        """Cut this copy back to ``size`` entries (its listeners end first); return how
        many entries were dropped."""
        stream, rt = self._get(name)
        for sub in list(rt.subscribers.values()):
            sub.stop()
        dropped = int(await self._in_io(stream.io_truncate, size, self.clock.wall_ms()))
        if dropped:
            log.warning(
                "stream copy cut back to its authority's",
                extra={"stream": name, "size": size, "dropped": dropped},
            )
        return dropped

    def _check_publisher(self, rt: _Runtime, token: int | None) -> None:
        rt.lease.check(token, self.clock.monotonic())

    def _admit(self, job: AppendJob) -> None:
        """Check a queued append again as its group commits (:class:`GroupCommit`): the
        stream may be gone, or its lease changed hands, since it was queued."""
        name = job.stream.name
        rt = self._runtime.get(name)
        # The very stream the job holds: a stream deleted (and maybe declared again)
        # since the job was queued has its file closed.
        if rt is None or self._streams.get(name) is not job.stream:
            raise StreamNotFound(f"stream {name!r} was deleted")
        if rt.deleting:
            # Deletion sets ``deleting`` before it queues the file's removal on the
            # I/O thread, and a group is admitted and queued there in one step: a
            # group admitted before runs first; one admitted after would find the
            # file closed (or gone), so it is refused here.
            raise StreamDeleting(f"stream {name!r} is being deleted; its listeners are finishing")
        if not job.replica:
            self._check_publisher(rt, job.token)

    def _wake_listeners(self, stream: Stream) -> None:
        """``stream`` has new durable entries: its listeners read on."""
        rt = self._runtime.get(stream.name)
        for sub in list(rt.subscribers.values()) if rt else []:
            sub.wake.set()

    # -- publisher lease ---------------------------------------------------------

    async def acquire(self, name: str, token: int | None, ttl_s: float | None) -> tuple[int, float]:
        """Take (or, with the holder's token, renew) the publisher lease: see
        :mod:`dynaq.streams.leases`."""
        stream, rt = self._get(name)
        ttl = self.config.publisher_lease_s if ttl_s is None else ttl_s
        if rt.lease.renew(token, ttl, self.clock.monotonic()):
            return rt.lease.token, ttl

        def bump() -> int:
            stream.publisher_token += 1
            stream.io_write_meta()
            return stream.publisher_token

        # Stored before it is handed out: a token is never issued twice.
        new = int(await self._in_io(bump))
        now = self.clock.monotonic()
        if rt.lease.held(now):  # a concurrent acquire got there first: it holds it
            raise PublisherFenced("the publisher lease was just taken by another request")
        rt.lease.grant(new, ttl, now)
        return new, ttl

    def release(self, name: str, token: int) -> None:
        _, rt = self._get(name)
        rt.lease.release(token, self.clock.monotonic())

    # -- listening -----------------------------------------------------------------

    def subscribe(self, name: str, start: Start, stops: Stops, fmt: str) -> Subscription:
        stream, rt = self._get(name)
        index, min_order = start_at(stream, start, self.clock.wall_ms())
        cursor = Cursor(stream, index, min_order, fmt, stops, self.config.listen_chunk_bytes)
        sub = Subscription(secrets.token_hex(8), stream, cursor)
        rt.subscribers[sub.id] = sub
        rt.idle.clear()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.cursor.close()
        rt = self._runtime.get(sub.stream.name)
        if rt is not None:
            rt.subscribers.pop(sub.id, None)
            if not rt.subscribers:
                rt.idle.set()

    def terminate(self, name: str, sub_id: str) -> None:
        _, rt = self._get(name)
        sub = rt.subscribers.get(sub_id)
        if sub is None:
            raise SubscriptionNotFound(f"no listener {sub_id!r} on stream {name!r}")
        sub.stop()

    def chunks(
        self, sub: Subscription, nowait: bool, alive: Callable[[], bool] = lambda: True
    ) -> AsyncGenerator[Chunk, None]:
        """``sub``'s chunks (see :func:`~dynaq.streams.subscriptions.follow`)."""
        return follow(sub, self._read, self.clock, nowait, alive, self.config.listen_idle_check_s)
