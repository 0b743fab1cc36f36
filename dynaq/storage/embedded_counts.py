"""Per-queue message counts kept by the embedded store, in the transaction of every write.

A node of several workers (or a node restarted on a deep backlog) needs one
figure for how many messages a queue stores. Counting in each process adds only
that process's writes; counting by scan is O(messages). So the store keeps the
count itself: every commit that puts a new message key adds one to its queue's
count and every delete that removes one takes one away, in a sub-database
(``counts``) written in the same LMDB transaction as the keys. Whatever process
committed, whatever crashed mid-commit, the counts are exactly the message keys
the store holds, as of any read transaction.

A message key is recognised by its shape (:data:`~dynaq.storage.base.MESSAGE_PREFIX`,
:data:`~dynaq.storage.base.MESSAGE_KEY_LEN`); its queue is the 4 bytes after the
prefix, and that is the count's key. A count that reaches zero is removed, so a
deleted queue leaves nothing behind once purged.

A store written before the counts existed is counted once, in one write
transaction (so no concurrent writer changes it meanwhile), when it is first
opened; :data:`COUNTED` marks it done.

Only a node of several workers keeps them (``LmdbStore(count_messages=...)``):
a lone process is the store's one writer and counts exactly in memory, and a
second LMDB database opened in the environment cost its batched enqueues
10-15 % in a same-run comparison, even unwritten. A lone node's open drops any
counts (its writes would not keep them); a node of workers counts again.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import lmdb

from dynaq.storage.base import MESSAGE_KEY_LEN, MESSAGE_PREFIX, Op, Put, is_message_key

COUNTS_DB = b"counts"
COUNTED = b"counted"
"""Present in the counts database once every message key is counted (4-byte queue
keys never collide with it)."""

_COUNT = struct.Struct(">q")
_M = MESSAGE_PREFIX[0]
_QUEUE = struct.Struct(">I")


class CountDeltas:
    """What one commit changes in each queue's count, applied in its transaction."""

    __slots__ = ("_by_queue",)

    def __init__(self) -> None:
        self._by_queue: dict[bytes, int] = {}

    def add(self, key: bytes, n: int) -> None:
        """``n`` more (or fewer) messages under message key ``key``'s queue."""
        q = key[1:5]
        self._by_queue[q] = self._by_queue.get(q, 0) + n

    def apply_ops(self, txn: Any, ops: list[Op], version: bytes) -> list[bool]:
        """Apply a batch of puts and deletes in order (each put's value after
        ``version``); return whether each delete's key existed (``True`` for puts).
        The per-op checks are written out: this runs once per op of every consume."""
        out: list[bool] = []
        by_queue = self._by_queue
        for op in ops:
            key = op.key
            if type(op) is Put:
                value = version + op.value
                if len(key) != MESSAGE_KEY_LEN or key[0] != _M:
                    txn.put(key, value)
                elif txn.put(key, value, overwrite=False):
                    q = key[1:5]
                    by_queue[q] = by_queue.get(q, 0) + 1
                else:
                    txn.put(key, value)
                out.append(True)
                continue
            existed = txn.delete(key)
            out.append(existed)
            if existed and len(key) == MESSAGE_KEY_LEN and key[0] == _M:
                q = key[1:5]
                by_queue[q] = by_queue.get(q, 0) - 1
        return out

    def put_messages(self, txn: Any, items: list[tuple[bytes, bytes]]) -> None:
        """Put message records ``items`` (new keys, as the domain writes them) and
        count the keys that were new. Ids are never reused, so every key is new in
        practice; one that exists is overwritten and not counted."""
        cur = txn.cursor()
        consumed, added = cur.putmulti(items, overwrite=False)
        by_queue = self._by_queue
        for key, _ in items:
            q = key[1:5]
            by_queue[q] = by_queue.get(q, 0) + 1
        if added == consumed:
            return
        for key, value in items:  # some existed and were left as they were
            if txn.get(key) != value:  # our value carries this commit's version
                txn.put(key, value)
                self.add(key, -1)

    def apply(self, txn: Any, counts: Any) -> None:
        """Write the changed counts (in the commit's transaction)."""
        for q, n in self._by_queue.items():
            if n == 0:
                continue
            raw = txn.get(q, db=counts)
            total = (0 if raw is None else _COUNT.unpack(raw)[0]) + n
            if total > 0:
                txn.put(q, _COUNT.pack(total), db=counts)
            elif raw is not None:
                txn.delete(q, db=counts)
        self._by_queue.clear()


def apply_uncounted(txn: Any, ops: list[Op], version: bytes) -> list[bool]:
    """:meth:`CountDeltas.apply_ops` for a store that keeps no counts."""
    out: list[bool] = []
    for op in ops:
        if type(op) is Put:
            txn.put(op.key, version + op.value)
            out.append(True)
        else:
            out.append(txn.delete(op.key))
    return out


def put_run(txn: Any, run: list[tuple[bytes, bytes]], deltas: CountDeltas | None) -> None:
    """Put ``run`` (one cursor per kind: py-lmdb gives the GIL away around every
    cursor open, close and put), counting its new message keys into ``deltas``
    (``None``: the store keeps no counts)."""
    if deltas is None:
        txn.cursor().putmulti(run)
        return
    messages, others = split_messages(run)
    if others:
        txn.cursor().putmulti(others)
    if messages:
        deltas.put_messages(txn, messages)


def forget_counts(env: Any) -> None:
    """Drop the counts of a store opened by a process that will not keep them."""
    try:
        counts = env.open_db(COUNTS_DB, create=False)
    except lmdb.NotFoundError:
        return
    with env.begin(write=True) as txn:
        txn.drop(counts, delete=True)


def split_messages(
    run: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """``run`` as (message puts, other puts), each in its order."""
    messages = [kv for kv in run if len(kv[0]) == MESSAGE_KEY_LEN and kv[0][0] == _M]
    if len(messages) == len(run):
        return run, []
    if not messages:
        return [], run
    return messages, [kv for kv in run if not is_message_key(kv[0])]


def count_all(env: Any, db: Any, counts: Any) -> bool:
    """Count every message key of a store that has no counts yet; return whether it
    had to (once per store, at its first open by a dynaq that keeps counts)."""
    with env.begin(db=counts) as txn:
        if txn.get(COUNTED) is not None:
            return False
    with env.begin(write=True, db=counts) as txn:
        if txn.get(COUNTED) is not None:  # another process counted meanwhile
            return False
        by_queue: dict[bytes, int] = {}
        cur = txn.cursor(db=db)
        if cur.set_range(MESSAGE_PREFIX):
            for key in cur.iternext(keys=True, values=False):
                if not key.startswith(MESSAGE_PREFIX):
                    break
                if len(key) == MESSAGE_KEY_LEN:
                    q = bytes(key[1:5])
                    by_queue[q] = by_queue.get(q, 0) + 1
        for q, n in by_queue.items():
            txn.put(q, _COUNT.pack(n))
        txn.put(COUNTED, b"1")
    return True


def read_counts(txn: Any, counts: Any, numbers: Sequence[int]) -> list[int]:
    """Each queue's message count, in a read transaction."""
    out: list[int] = []
    for number in numbers:
        raw = txn.get(_QUEUE.pack(number), db=counts)
        out.append(0 if raw is None else _COUNT.unpack(raw)[0])
    return out
