"""The embedded store's commit: every pending write in one LMDB transaction, with
the full-store reserve, whoever runs it (the writer thread of
:mod:`dynaq.storage.embedded_commits`, or the writer process of
:mod:`dynaq.storage.embedded_writer`).

A write that adds messages is refused with
:class:`~dynaq.errors.InsufficientStorage` when it would eat into the reserve
that deletes need (see :mod:`dynaq.storage.embedded`); one request that spoils
the shared transaction is retried alone, so the others still commit.

Every value is stored as an 8-byte big-endian version followed by the payload.
Versions come from a per-committer hybrid clock (wall-clock microseconds, bumped
to stay strictly increasing), so a key's version changes on every write, even
across restarts. Several processes committing to one environment (a node's
workers) each stamp versions with their own residue modulo ``version_tags``, so
two of them never write the same version of a key within one microsecond.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lmdb

from dynaq.errors import DynaqError, InsufficientStorage, StorageError
from dynaq.storage.base import MESSAGE_PREFIX, Delete, Put, is_message_key
from dynaq.storage.embedded_counts import (
    COUNTS_DB,
    CountDeltas,
    apply_uncounted,
    count_all,
    forget_counts,
    put_run,
)
from dynaq.storage.embedded_reserve import Reserve

VERSION = struct.Struct(">Q")
VERSION_LEN = VERSION.size

# Kinds of write request a committer understands.
BATCH = 0
PUT = 1
PUT_IF_ABSENT = 2
PUT_IF_VERSION = 3
DELETE = 4

# Per-entry cost beyond key and value (node header, version) when estimating a write.
_ENTRY_OVERHEAD = 24
_MOVE_ALLOWANCE = 256
"""What a move may add to each record it moves (a dead letter's ``origin``) and still
count as no growth."""


@dataclass(slots=True)
class WriteRequest:
    """One write: its kind and payload, and once committed its result or error.
    ``future`` and ``loop`` are the caller's, where the caller is in this process."""

    kind: int
    payload: Any
    future: Any = None
    loop: Any = None
    result: Any = None
    error: BaseException | None = None
    size: int = field(default=1)


def open_environment(path: str, map_size: int) -> Any:
    """The store's LMDB environment, opened with the same flags in every process that
    opens it (the node, its workers, its writer process)."""
    return lmdb.open(
        path,
        map_size=map_size,
        max_dbs=4,
        sync=True,
        metasync=True,
        readahead=False,
        max_readers=256,
    )


def open_databases(env: Any, count_messages: bool = True) -> tuple[Any, Any]:
    """The store's key-value database and its message counts' (see
    :mod:`dynaq.storage.embedded_counts`), counting a store written before the
    counts existed once. Without ``count_messages``: no counts (``None``), and any
    left by an earlier open are dropped, since this open's writes will not keep
    them (the next open that counts counts again)."""
    db = env.open_db(b"kv")
    if not count_messages:
        forget_counts(env)
        return db, None
    counts = env.open_db(COUNTS_DB)
    count_all(env, db, counts)
    return db, counts


def split_tags(settings: dict[str, Any], which: int) -> dict[str, Any]:
    """``settings`` for one of two committers sharing a store's version tag: each
    gets a residue of its own modulo twice the tags (``which`` 0 or 1)."""
    return {
        **settings,
        "version_tag": settings["version_tag"] * 2 + which,
        "version_tags": settings["version_tags"] * 2,
    }


def settings_to_wire(settings: dict[str, Any]) -> dict[str, Any]:
    """:class:`CommitCore`'s keyword settings as JSON (the writer process's argument)."""
    return {
        **settings,
        "growth_prefixes": [p.hex() for p in settings["growth_prefixes"]],
        "added_prefixes": [p.hex() for p in settings["added_prefixes"]],
    }


def settings_from_wire(wire: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`settings_to_wire`."""
    return {
        **wire,
        "growth_prefixes": tuple(bytes.fromhex(p) for p in wire["growth_prefixes"]),
        "added_prefixes": tuple(bytes.fromhex(p) for p in wire["added_prefixes"]),
    }


class CommitCore:
    """Commits groups of :class:`WriteRequest` to one LMDB environment.

    ``fill_bytes`` of the ``map_size`` may hold data before message writes are
    refused; ``min_free_disk`` bytes of the disk are likewise kept for deletes.
    At most ``max_commit_ops`` operations go into one commit (:meth:`take`). New
    keys under ``growth_prefixes``, and every key under ``added_prefixes``, count
    against the limit like messages (see :func:`growth_bytes`). Not thread-safe:
    one thread commits.
    """

    def __init__(
        self,
        env: Any,
        db: Any,
        path: str,
        *,
        counts: Any = None,
        map_size: int,
        fill_bytes: int,
        min_free_disk: int,
        max_commit_ops: int,
        growth_prefixes: tuple[bytes, ...] = (),
        added_prefixes: tuple[bytes, ...] = (),
        version_tag: int = 0,
        version_tags: int = 1,
    ) -> None:
        if not 0 <= version_tag < version_tags:
            raise ValueError("version_tag must be in [0, version_tags)")
        self._version_tag = version_tag
        self._version_tags = version_tags
        self._env = env
        self._db = db
        self._counts = counts
        self._growth_prefixes = growth_prefixes
        self._added_prefixes = MESSAGE_PREFIX, *added_prefixes
        self._reserve = Reserve(
            env, db, path, map_size=map_size, fill_bytes=fill_bytes, min_free_disk=min_free_disk
        )
        self.max_commit_ops = max_commit_ops
        self._last_version = 0
        self.commits = 0
        self.committed_ops = 0

    def take(self, waiting: list[WriteRequest]) -> tuple[list[WriteRequest], list[WriteRequest]]:
        """The first requests of ``waiting`` that hold at most ``max_commit_ops``
        operations (at least one request), and the rest."""
        ops = 0
        for i, req in enumerate(waiting):
            ops += req.size
            if ops >= self.max_commit_ops:
                return waiting[: i + 1], waiting[i + 1 :]
        return waiting, []

    def next_version(self) -> int:
        # Only the committing thread calls this, so no lock is needed.
        v = max(self._last_version + 1, time.time_ns() // 1000)
        tags = self._version_tags
        if tags > 1:
            # The next value at or above v that carries this process's tag.
            v += (self._version_tag - v) % tags
        self._last_version = v
        return v

    def commit(self, batch: list[WriteRequest]) -> None:
        """Commit ``batch`` (set each request's result or error); never raises."""
        deltas = None if self._counts is None else CountDeltas()
        try:
            with self._env.begin(write=True, db=self._db) as txn:
                sizes = [
                    growth_bytes(txn, r, self._growth_prefixes, self._added_prefixes) for r in batch
                ]
                room = self._reserve.room(txn) if any(sizes) else None
                # Puts of consecutive put-only requests go to LMDB in one call on
                # one cursor (in request order): py-lmdb gives the GIL away around
                # every cursor open, close and put, and each time the busy event
                # loop may take it, so per-request cursors multiply the handoffs.
                run: list[tuple[bytes, bytes]] = []
                for req, grows in zip(batch, sizes, strict=True):
                    if grows and room is not None:
                        left, why = room
                        if grows > left:
                            req.error = InsufficientStorage(why)
                            continue
                        room = (left - grows, why)
                    if self._add_puts(req, run):
                        continue
                    if run:
                        put_run(txn, run, deltas)
                        run = []
                    req.result = self._apply(txn, req, deltas)
                if run:
                    put_run(txn, run, deltas)
                if deltas is not None:
                    deltas.apply(txn, self._counts)
            self.commits += 1
            self.committed_ops += sum(r.size for r in batch if r.error is None)
            return
        except lmdb.Error as exc:
            if len(batch) == 1:
                batch[0].error = self._reserve.translate(exc)
                return
        # One request spoiled the shared transaction (e.g. the map is full):
        # retry each on its own so the others still commit.
        for req in batch:
            req.error = None
            self.commit([req])

    def _add_puts(self, req: WriteRequest, run: list[tuple[bytes, bytes]]) -> bool:
        """Append ``req``'s writes to ``run`` and set its result, if it only puts
        (enqueue, publish, a plain put): the common case. False: apply it alone."""
        kind, p = req.kind, req.payload
        if kind == BATCH and all(type(op) is Put for op in p):
            version = VERSION.pack(self.next_version())
            run.extend([(k, version + v) for k, v in p])
            req.result = [True] * len(p)
            return True
        if kind == PUT:
            key, value = p
            v = self.next_version()
            run.append((key, VERSION.pack(v) + value))
            req.result = v
            return True
        return False

    def _apply(self, txn: Any, req: WriteRequest, deltas: CountDeltas | None) -> Any:
        """Apply a request :meth:`_add_puts` did not take (counting the message keys
        it adds and removes into ``deltas``)."""
        kind, p = req.kind, req.payload
        if kind == BATCH:
            version = VERSION.pack(self.next_version())
            if deltas is None:
                return apply_uncounted(txn, p, version)
            return deltas.apply_ops(txn, p, version)
        if kind == PUT_IF_ABSENT:
            key, value = p
            v = self.next_version()
            if not txn.put(key, VERSION.pack(v) + value, overwrite=False):
                return None
            if deltas is not None and is_message_key(key):
                deltas.add(key, 1)
            return v
        if kind == PUT_IF_VERSION:
            key, value, expected = p
            current = txn.get(key)
            if current is None or VERSION.unpack_from(current)[0] != expected:
                return None
            v = self.next_version()
            txn.put(key, VERSION.pack(v) + value)
            return v
        if kind == DELETE:
            existed = txn.delete(p)
            if existed and deltas is not None and is_message_key(p):
                deltas.add(p, -1)
            return existed
        raise AssertionError(kind)


def growth_bytes(
    txn: Any,
    req: WriteRequest,
    growth_prefixes: tuple[bytes, ...],
    added_prefixes: tuple[bytes, ...] = (MESSAGE_PREFIX,),
) -> int:
    """About how many bytes ``req`` adds that must stay out of the reserve (0: none).

    A put under ``added_prefixes`` (messages, and the records written once with
    them: dedup records) always counts, unread: reading each key would cost the
    writer a GIL round trip per put. A put under ``growth_prefixes`` (batch
    headers and item blocks) counts when it creates its key: opening batches and
    adding items is refused on a full store, while overwriting an existing
    record (a batch ack) uses the reserve like a delete, so a consumer can still
    delete a batch-tagged message.
    """
    if req.kind == BATCH:
        puts = [(op.key, op.value) for op in req.payload if type(op) is Put]
    elif req.kind in (PUT, PUT_IF_ABSENT):
        puts = [req.payload]
    else:
        return 0
    total = 0
    for key, value in puts:
        if key.startswith(added_prefixes) or (
            key.startswith(growth_prefixes) and txn.get(key) is None
        ):
            total += len(key) + len(value) + _ENTRY_OVERHEAD
    if total and req.kind == BATCH:
        # A move (a delayed message made visible, a dead letter, a redrive page, a
        # transaction's consume and produce) frees what it deletes in the same
        # batch: only its net growth counts, so moves go on in a full store, as
        # deletes do, instead of leaving due or dead-lettered messages stuck.
        for op in req.payload:
            if type(op) is Delete and op.key.startswith(added_prefixes):
                old = txn.get(op.key)
                if old is not None:
                    total -= len(op.key) + len(old) + _ENTRY_OVERHEAD + _MOVE_ALLOWANCE
        total = max(total, 0)
    return total


def resolve_all(reqs: list[WriteRequest]) -> None:
    """Answer each request's future (on its loop's thread) with its result or error."""
    for req in reqs:
        if req.future.done():
            continue
        if req.error is not None:
            req.future.set_exception(as_store_error(req.error))
        else:
            req.future.set_result(req.result)


def as_store_error(error: BaseException) -> BaseException:
    """What a caller sees of a failed commit: dynaq's errors as they are, any other
    (an LMDB error) as a :class:`~dynaq.errors.StorageError`."""
    if isinstance(error, DynaqError):
        return error
    err = StorageError(f"LMDB write failed: {error}")
    err.__cause__ = error
    return err


SLOW_ON_LOOP_S = 0.005
"""A commit on the event loop that took longer than this was too long to block it."""
AFTER_SLOW = 200
"""Lone writes that go to the writer again after such a commit."""


class LoopCommits:
    """Commits of lone writes on the event loop itself, for a writer thread's or a
    writer process's committer.

    A lone write (one request in its loop iteration, the writer idle, the last
    commit a lone one too) pays two hand-offs through the writer (a wake-up of
    the writer, then of the loop: on a VM, each costs about as much as the
    commit's own CPU) while nobody else is waiting. Committing it on the loop
    skips both. The loop is blocked meanwhile, so a commit that took longer than
    :data:`SLOW_ON_LOOP_S` (a slow or busy disk) sends the next
    :data:`AFTER_SLOW` lone writes through the writer again. The caller checks
    that the writer is idle: LMDB's write lock is then free, and commits stay in
    the order their writes were made.
    """

    def __init__(self, core: CommitCore, on_commit: Callable[[float], None] | None) -> None:
        self.core = core
        self._on_commit = on_commit
        self._to_writer = 0

    def allowed(self) -> bool:
        """Whether the next lone write may commit here (each call spends one of the
        writes owed to the writer after a slow commit)."""
        if self._to_writer > 0:
            self._to_writer -= 1
            return False
        return True

    def commit(self, reqs: list[WriteRequest]) -> None:
        """Commit ``reqs`` now, on this thread, and answer them."""
        started = time.perf_counter()
        try:
            self.core.commit(reqs)
        except Exception as exc:  # noqa: BLE001 - the caller must get an answer
            reqs[0].error = as_store_error(exc)
        elapsed = time.perf_counter() - started
        resolve_all(reqs)
        if elapsed > SLOW_ON_LOOP_S:
            self._to_writer = AFTER_SLOW
        if self._on_commit is not None:
            self._on_commit(elapsed)
