"""Deleting messages: the delete itself and the listeners told about it.

:class:`Deleter` removes messages by id and keeps what depends on a delete
in step: in-flight state, depth, hints to the slice owners, metrics and the
delete listeners. :class:`~dynaq.services.queues.transactions.Transactions`
shares its two halves (:meth:`Deleter.before_deleting` and
:meth:`Deleter.after_deleted`) around a batch of its own.

Guarantees:

* A :class:`BeforeDelete` listener runs before the messages are deleted; if
  it raises, nothing is deleted and the error is the delete's.
* After-delete listeners run only once the delete is durable, and only for
  the messages that existed (and had attributes).
* A message this node has in flight costs no read for its attributes; others
  are read in one batch, and only when some listener needs them.
* Concurrent deletes of one message through this :class:`Deleter` (one node's
  process) behave as if they ran one after another: exactly one reports the
  message deleted and runs the after-delete work (depth, metrics, listeners);
  the others report it absent. A store cannot be relied on for this: Cassandra
  reads whether a key exists, then deletes it unconditionally, so two deletes
  racing there both find it. Deletes of different ids never wait for each other.
  Across nodes (or worker processes) the race remains on Cassandra
  (``docs/storage-cassandra.md``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass

from dynaq.core import keys
from dynaq.core.messages import decode
from dynaq.core.partitions import QueueState
from dynaq.metrics import Metrics
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.handover import HintRouter
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Delete, Store

DeleteListener = Callable[[QueueInfo, list[tuple[int, dict[str, str]]]], Awaitable[None]]
"""Called after messages were deleted (acknowledged), with ``(id, attributes)`` of
each deleted message that had attributes."""


@dataclass(frozen=True)
class BeforeDelete:
    """A delete listener that must succeed for the delete to happen.

    It runs before the messages are deleted, with ``(id, attributes)`` of each
    message about to be deleted that has attributes (one still stored, or in
    flight here). If it raises, nothing is deleted and the error is the
    delete's: the caller retries the delete and the listener runs again, so it
    must be idempotent. This is how an effect is tied to a delete without a
    window: an acknowledged delete implies the listener succeeded.
    """

    listener: DeleteListener


class _Deleting:
    """One delete's hold on the ids it is deleting (see :meth:`Deleter.delete`).

    Cheap when nobody waits (the usual case): the future exists only once a
    concurrent delete of one of its ids waits for it.
    """

    __slots__ = ("_done", "finished", "removed")

    def __init__(self) -> None:
        self._done: asyncio.Future[None] | None = None
        self.finished = False
        """Whether the delete is over, its after-delete work included."""
        self.removed: Collection[int] = ()
        """The ids it found and deleted; final once :attr:`finished`."""

    async def wait(self) -> None:
        """Return once the delete is over (at once if it is)."""
        if self.finished:
            return
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
        # Shielded: a waiter given up (cancelled) must not cancel the others' future.
        await asyncio.shield(self._done)

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set_result(None)


class Deleter:
    """Deletes messages by id and tells the listeners, the hints and the figures."""

    def __init__(
        self, store: Store, states: QueueStates, hints: HintRouter, metrics: Metrics
    ) -> None:
        self._store = store
        self._states = states
        self._hints = hints
        self._metrics = metrics
        self._after_delete: list[DeleteListener] = []
        self._before_delete: list[DeleteListener] = []
        # (queue number, message id) -> the delete of it under way here.
        self._deleting: dict[tuple[int, int], _Deleting] = {}

    def add_listener(self, listener: DeleteListener | BeforeDelete) -> None:
        """Be told about every deleted message with attributes: after the delete is
        durable, or before it and able to stop it (:class:`BeforeDelete`).

        A message this node has in flight (it served it) carries its attributes
        in the in-flight table, so the usual receive-then-delete costs no read;
        other ids (deleted through a node that did not serve them, or never
        received) are read in one batch before the delete.
        """
        if isinstance(listener, BeforeDelete):
            self._before_delete.append(listener.listener)
        else:
            self._after_delete.append(listener)

    async def delete(self, info: QueueInfo, ids: Iterable[int]) -> list[int]:
        """Delete messages; return the ids that existed (and were removed by this call).

        :class:`BeforeDelete` listeners run first; if one raises, nothing is
        deleted and the error propagates. An id another delete on this node is
        deleting meanwhile is waited for: if that one removed it, it is not
        removed (nor counted, nor told to the listeners) again here; if that one
        failed or found it absent, this call deletes it itself.
        """
        ids = list(dict.fromkeys(ids))
        removed: list[int] = []
        number = info.number
        deleting = self._deleting
        while ids:
            # Hold the ids nobody here is deleting, delete them, then wait for the
            # others' deletes. Never waiting while holding ids is what keeps two
            # deletes of overlapping id lists from waiting for each other forever.
            mine = _Deleting()
            free: list[int] = []
            busy: dict[int, _Deleting] | None = None
            for i in ids:
                other = deleting.setdefault((number, i), mine)
                if other is mine:
                    free.append(i)
                else:
                    if busy is None:
                        busy = {}
                    busy[i] = other
            try:
                if free:
                    removed += await self._delete_held(info, free, mine)
            finally:
                for i in free:
                    del deleting[(number, i)]
                mine.finish()
            if busy is None:
                break
            gone: dict[int, set[int]] = {}  # id(other) -> what it removed
            for other in busy.values():
                if id(other) not in gone:
                    await other.wait()
                    gone[id(other)] = set(other.removed)
            ids = [i for i, other in busy.items() if i not in gone[id(other)]]
        return removed

    async def _delete_held(self, info: QueueInfo, ids: list[int], mine: _Deleting) -> list[int]:
        """Delete ``ids`` (held by ``mine``); return those that existed."""
        attrs = await self.before_deleting(info, ids)
        existed = await self._store.write_batch([Delete(keys.message(info.number, i)) for i in ids])
        removed = [i for i, e in zip(ids, existed, strict=True) if e]
        # Final before the after-delete work: should it raise, the delete is still
        # durable and a waiting delete must not report (or count) these again.
        mine.removed = removed
        await self.after_deleted(info, ids, removed, attrs)
        return removed

    async def before_deleting(self, info: QueueInfo, ids: list[int]) -> dict[int, dict[str, str]]:
        """Run the :class:`BeforeDelete` listeners for ``ids`` (raising stops the delete);
        return the attributes the after-delete listeners will need."""
        attrs: dict[int, dict[str, str]] = {}
        if self._after_delete or self._before_delete:
            attrs = await self._attributes(info, self._states.get(info.number), ids)
        if self._before_delete and attrs:
            doomed = [(i, attrs[i]) for i in ids if i in attrs]
            for listener in self._before_delete:
                await listener(info, doomed)
        return attrs

    async def after_deleted(
        self, info: QueueInfo, ids: list[int], removed: list[int], attrs: dict[int, dict[str, str]]
    ) -> None:
        """Account for a durable delete of ``ids`` (``removed``: those that existed):
        in-flight state, depth, hints to the owners, metrics, delete listeners."""
        st = self._states.get(info.number)
        if st is not None:
            st.note_deleted(ids)
            st.forget_all(ids)
        self._hints.deleted(info, removed)
        if removed:
            self._states.add_depth(info.number, -len(removed))
            self._metrics.incr(f"{info.name}.deleted.count", len(removed))
            if attrs and self._after_delete:
                deleted = [(i, attrs[i]) for i in removed if i in attrs]
                if deleted:
                    for listener in self._after_delete:
                        await listener(info, deleted)

    async def _attributes(
        self, info: QueueInfo, st: QueueState | None, ids: list[int]
    ) -> dict[int, dict[str, str]]:
        """Attributes of the messages about to be deleted: from the in-flight table, else read."""
        out: dict[int, dict[str, str]] = {}
        unknown: list[int] = []
        for i in ids:
            f = st.inflight.get(i) if st is not None else None
            if f is None:
                unknown.append(i)
            elif f.attributes:
                out[i] = f.attributes
        if unknown:
            items = await self._store.get_many([keys.message(info.number, i) for i in unknown])
            for i, it in zip(unknown, items, strict=True):
                if it is not None:
                    m = decode(i, it.value)
                    if m.attributes:
                        out[i] = m.attributes
        return out
