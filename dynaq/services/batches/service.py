"""The batch service: one facade over headers, the two modes, the relay and the reaper."""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.core.membership import MembershipView
from dynaq.errors import BatchNotFound, InvalidInput, WrongBatchMode
from dynaq.metrics import Metrics
from dynaq.services.batches.estimated import EstimatedBatches
from dynaq.services.batches.exact import ExactBatches
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.reaper import Reaper
from dynaq.services.batches.reconcile import Reconciler
from dynaq.services.batches.records import BatchHeader, Completion, CompletionListener
from dynaq.services.batches.relay import CompletionRelay
from dynaq.services.batches.settle import Settler
from dynaq.storage.base import Put, Store


class _Claimed(Exception):
    """Another node's claim to publish a completion event is running."""


class BatchService:
    """Exact and estimated batch tracking on the storage contract.

    ``max_items`` caps the items one request may add (and the estimated
    counter's steps). Completion listeners (the completion-topic publisher)
    get every completion at least once: at once from the node whose call
    completed the batch, retried by it while it runs, or from the reaper's
    repair pass if it died (see :mod:`~dynaq.services.batches.relay`).

    ``settle_s`` is how long an operation may leave a trace (a repair marker,
    an add in flight, a completion record) before the reaper takes it for
    interrupted and finishes or undoes it; ``skew_s`` is the margin for clocks
    that disagree, added to that grace and to the reaper's age limits.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        view: MembershipView,
        metrics: Metrics,
        *,
        max_items: int = 1_000_000,
        open_max_age_s: float = 7200.0,
        closed_max_age_s: float = 604_800.0,
        reap_interval_s: float = 60.0,
        reap_batch: int = 1000,
        settle_s: float = 120.0,
        skew_s: float = 60.0,
        relay_retry_s: float = 1.0,
    ) -> None:
        self._clock = clock
        self._store = store
        self._metrics = metrics
        self.max_items = max_items
        """The most items one request may add (read by the API's OpenAPI description)."""
        self._headers = Headers(store, clock, metrics)
        self._claimant = secrets.token_hex(8)
        """This process in publish claims (a restarted node is another claimant)."""
        self._skew_ms = int(skew_s * 1000)
        self._relay = CompletionRelay(store, clock, self._headers, metrics, retry_s=relay_retry_s)
        self._headers.on_complete = self._relay.deliver
        self._headers.on_uncertain = self._relay.watch
        settler = Settler(store, clock, self._headers)
        self._exact = ExactBatches(
            store, self._headers, settler, clock, metrics, max_items, add_deadline_s=settle_s / 2
        )
        self._estimated = EstimatedBatches(self._headers, max_items)
        self._reaper = Reaper(
            store,
            clock,
            view,
            metrics,
            self._headers,
            Reconciler(store, clock, settler, self._relay, grace_s=settle_s + skew_s),
            open_max_age_s=open_max_age_s,
            closed_max_age_s=closed_max_age_s,
            reap_interval_s=reap_interval_s,
            reap_batch=reap_batch,
            skew_s=skew_s,
        )

    async def claim_completion_event(self, batch_id: int, for_s: float) -> bool:
        """Claim publishing ``batch_id``'s completion event for ``for_s`` seconds.

        The claim is a versioned header update, so of several nodes delivering
        the same completion at once (the flipping node's relay, a restarted
        node, the reaper) one publishes and the others wait for its marker. A
        claim is this process's again and again (its retries go on at once);
        another's is honoured until it runs out by this node's clock, or when it
        ends further ahead than ``for_s`` plus ``skew_s`` (a claimer whose clock
        runs far ahead must not hold the event back for as long as its skew).
        Two processes whose clocks differ by less than ``skew_s`` therefore never
        both hold a claim that is running.
        """
        span = int(for_s * 1000)
        # A claim written a moment ago, by a clock a little ahead of this one (or
        # read later than this one), ends a little further ahead than ``span``:
        # it is still running. Only a claim beyond the skew margin is implausible.
        furthest = span + self._skew_ms

        def change(h: BatchHeader) -> Completion | None:
            # The clock is read with the header, at each attempt: read once before
            # the update, it would be older than a claim another process wrote
            # meanwhile (the one this attempt's conditional write lost to), which
            # would then seem to end too far ahead and be taken over: two publishes.
            now = self._clock.wall_ms()
            claim = h.publish_claim
            if (
                claim is not None
                and claim[0] != self._claimant
                and now < claim[1] <= now + furthest
            ):
                raise _Claimed
            h.publish_claim = (self._claimant, now + span)
            return None

        try:
            await self._headers.update(batch_id, change, touch=False)
        except _Claimed:
            return False
        return True

    def on_completion(self, listener: CompletionListener) -> None:
        """Give ``listener`` every completion (at least once; it must tolerate a repeat)."""
        self._relay.listeners.append(listener)

    # lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        self._relay.start()
        self._reaper.start()

    async def stop(self) -> None:
        await self._reaper.stop()
        await self._exact.drain()
        await self._estimated.drain()
        await self._relay.stop()

    # both modes ----------------------------------------------------------

    async def open(self, mode: str, user_key: str | None) -> int:
        """Create a batch; return its id."""
        # The API has checked the type; the length limit is the service's own.
        if user_key is not None and len(user_key) > 1024:
            raise InvalidInput("userKey must be a string of at most 1024 characters")
        now = self._clock.wall_ms()
        batch_id = await self._headers.create(
            BatchHeader(mode, user_key, created_ms=now, updated_ms=now)
        )
        self._metrics.incr(f"batches.{mode}.opened.count")
        return batch_id

    async def get(self, batch_id: int, mode: str | None = None) -> BatchHeader:
        """The batch's header; :class:`~dynaq.errors.WrongBatchMode` if not of ``mode``."""
        return await self._headers.get(batch_id, mode)

    async def close(self, batch_id: int, mode: str) -> bool:
        """Close the batch; return whether it is complete (now or already)."""

        def change(h: BatchHeader) -> Completion | None:
            if h.mode != mode:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            h.closed = True
            return self._headers.complete_if_done(batch_id, h)

        header, _ = await self._headers.update(batch_id, change)
        return header.complete

    async def delete(self, batch_id: int, mode: str | None = None) -> int:
        """Delete a batch and its blocks; return how many items it held."""
        await self._headers.get(batch_id, mode)
        header = await self._headers.mark_removing(batch_id)
        if header is None:
            raise BatchNotFound(f"batch {batch_id} does not exist")
        await self._headers.remove(batch_id)
        return header.items

    # exact ---------------------------------------------------------------

    async def add_items(self, batch_id: int, count: int) -> list[tuple[uuid.UUID, int]]:
        """Add ``count`` items to an open exact batch; return its blocks ``(id, upto)``."""
        return await self._exact.add_items(batch_id, count)

    async def ack(self, refs: Sequence[ItemRef]) -> list[Completion]:
        """Ack items (idempotent); return the batches this call completed."""
        return await self._exact.acks.ack(refs)

    async def fail(self, failures: Sequence[tuple[ItemRef, str, dict[str, Any]]]) -> None:
        """Record items as failed, then ack them: ``(ref, item id, detail)`` each.

        Used when an item's message is dead-lettered. The record is written
        first, so an acked failed item is always listed; both steps are
        idempotent (the caller retries the whole call on an error). A batch
        completes once every item is acked or failed.
        """
        await self._store.write_batch(
            [
                Put(keys.batch_failed_item(ref.batch_id, item), json.dumps(detail).encode())
                for ref, item, detail in failures
            ]
        )
        await self.ack([ref for ref, _, _ in failures])

    async def failed_items(self, batch_id: int, limit: int = 1000) -> list[dict[str, Any]]:
        """Up to ``limit`` failed items of a batch: ``{"item": id, **detail}``."""
        start, end = keys.batch_failed_items(batch_id)
        rows = await self._store.scan(start, end, limit)
        n = len(start)
        return [{"item": k[n:].decode(), **json.loads(v)} for k, v in rows]

    # estimated -----------------------------------------------------------

    async def incr(self, batch_id: int, by: int) -> BatchHeader:
        """Add ``by`` expected items to an open estimated batch."""
        return await self._estimated.incr(batch_id, by)

    async def decr(self, acks: Sequence[tuple[int, int]]) -> list[Completion]:
        """Subtract every ``(batch_id, by)``; return the batches this call completed."""
        return await self._estimated.decr(acks)

    # cleanup -------------------------------------------------------------

    async def remove_older(self, mode: str, closed: bool, since_ms: int) -> tuple[int, int]:
        """Delete open (or closed) batches of ``mode`` last active before ``since_ms``;
        return ``(batches removed, items they held)``."""
        return await self._reaper.remove_older(mode, closed, since_ms)

    def is_reaper(self) -> bool:
        """Whether the ring makes this node the one reaper."""
        return self._reaper.is_reaper()

    async def reap_once(self) -> tuple[int, int]:
        """One bounded reaper round (see :mod:`~dynaq.services.batches.reaper`)."""
        return await self._reaper.reap_once()

    # Views of the parts' state, for tests that check per-batch state goes
    # when a batch goes idle and that the reaper is fenced; not for callers.

    @property
    def _locks(self) -> Mapping[int, asyncio.Lock]:
        return self._headers.locks

    @property
    def _lock_users(self) -> Mapping[int, int]:
        return self._headers.lock_users

    @property
    def _combiners(self) -> Mapping[int, object]:
        return self._exact.acks.active

    @property
    def _decrement_groups(self) -> Mapping[int, object]:
        return self._estimated.decrements.active

    @property
    def _reaper_lane(self) -> int:
        return self._reaper.lane

    async def _take_lease(self) -> bool:
        return await self._reaper.take_lease()
