"""Exactly-once steps over dynaq streams: Cues' persistence and recovery components,
adapted to appends over HTTP.

**Persistence component** (every step; the fault point names are in brackets):

1. Take the step's entries from the input tailers (reading a stream changes
   nothing, so this may come first). On a first attempt write
   ``snapshot{tailers}`` to the backing stream [``snapshot.before``,
   ``snapshot.written``]; a retry writes none. The delivery hash is
   ``sha256(canonical JSON {proc, tailers})`` truncated to 64 bits.
2. Alts: on the first attempt write ``snapshot-alts{tailer}`` for the input it
   took [``alts.written``]; a retry takes the recorded input. Imperative
   processors record each read the same way (as it happens).

   Except for imperative processors, the snapshot (and ``snapshot-alts``) go out
   in one append with the step's first attempt record (4, or ``attempt-nil``):
   one fsync'd request where Cues has two or three. The records keep their
   order, so recovery reads exactly what Cues would have written; what changes
   is only that a crash before that append leaves no snapshot, which is the
   state before the step began: nothing of the step was written outside the
   backing stream either (every output comes after its attempt record), so the
   step runs again as a first attempt, with the same tailers and so the same
   hash. The fault points of 1 and 2 fire right after that append.
3. Run the user function [``fn.done``]; its outputs, or its handled error, become
   the step's *plan*: a list of writes, each stamped with
   ``_cues: {hash, slot, proc}``. No writes: ``attempt-nil{hash}``
   [``nil.written``], delivered.
4. For each slot of the plan: let ``N`` be the destination's size (or, on a
   first try, the size this worker's own last append there left). Write
   ``attempt-output|attempt-error{hash, slot, index: N, writes, next}``
   [``attempt.written``], *then* append the entry **conditionally at index N**
   (``expect_index``) [``output.written``]. If another writer took ``N``
   (``index_taken``), read the size again and go round: check every recorded
   index below it, record a new attempt at the new size, append there.

**Recovery component** (on start, and after any interruption): read back to the
last snapshot. ``attempt-nil`` with its hash: delivered, resume after it. Attempt
records: finish the recorded plan, slot by slot, as in 4 (checking every
recorded index first) [``recovery.attempt.written``, ``recovery.output.written``].
Only a snapshot (and ``snapshot-alts``): reset the tailers to it and retry without
writing a new snapshot, taking the recorded alts input. Recovery writes only
attempts and outputs that the checks allow, so it is idempotent and may crash.

**Departures from Cues, and why.** Cues knows a write's index before it commits
(a queue transaction); over HTTP the attempt record is written first, naming the
index, and the append is made conditional on it (``expect_index``, 409
``index_taken``). Cues' recovery re-runs the step when the last attempt's hash
does not match; here an attempt record also carries the step's whole *plan*
(every write, stamped) and the tailers after it, and recovery *finishes that
plan* instead of re-running the function: an earlier append may still be in
flight, so the step must not change its mind (an output in one attempt and an
error in the next would be both). A fork's several outputs are slots of one
plan, each with its own attempt records.

**Guarantee.** Each step (its snapshot's tailers) is delivered at most once per
slot, and, once the processor runs long enough without a crash, exactly once: each
slot's entry lands on its destination exactly once, and the steps of one
processor go to either outputs or its error destination, never both, never
neither (a step's plan is fixed by its first attempt record and never re-planned).

**Proof sketch.** (a) *Single writer of the backing stream*: every backing append
carries the publisher lease's token, checked again when the append commits, so
after another worker took the lease nothing the old worker sends lands there.
(b) *Every output append is preceded by its attempt record*, durable before the
append is sent, naming the one index the append can land at (conditional
append). So the set of places a slot can have landed is exactly the set of
indexes recorded for it since the snapshot, even if some append from a dead or
fenced worker is still in flight. (c) *An index is settled once the stream holds
more entries than it* (size > N): what is at N can then never change. A
recorded index below the size is read once and decides; a recorded index equal
to the size is unsettled — a stale append may still land there — and the next
append of this slot goes to exactly that index, so the stale one and the new one
cannot both land (only one append can take N). No append of the slot ever goes
past an unsettled recorded index, because a new index is recorded only when the
size has moved past every earlier one. (d) A slot is written again only after
every recorded index was seen settled and holding someone else's entry: then no
copy of it exists and none can appear. (e) A step with no attempt record wrote
nothing outside the backing stream, so running it again (same tailers, same
alts input, so same entries and same hash) delivers it once. (f) ``next``
tailers come from the same record as the plan, so a delivered step is never
taken again.

**In a ring.** Each stream has one authority; a worker may talk to any node, which
forwards every request of this algorithm to it unchanged (``expect_index``, the
publisher token, reads, the hidden listing), so the conditional append and the
lease are decided in one place, as on a node alone. When an authority fails, its
most complete live copy takes over under a new epoch and every other copy cuts its
tail back to that size; the new epoch's publisher tokens start above every earlier
one, so the worker's next backing append is fenced (``LeaseLost``): it takes the
lease again and recovers. What a failover may cut is only
what was never acknowledged, **with** ``streams.acks = "quorum"`` (the default):
an acknowledged append is on a majority of the copies, so on the most complete
survivor of one failure. Then:

- *An output cut away* was an append whose answer the worker never got (a
  connection error, 503 ``stream_unavailable`` or ``replication_timeout``). Its
  attempt record names ``N``; after the failover ``N`` is either the size (unsettled:
  the retry goes exactly there), above the size (a new attempt at the size; the
  old append cannot land any more: it was only on the dead authority, a forwarding
  node never resends it, and a node that comes back cuts its tail and refuses
  requests for a stream it no longer serves), or below it, holding another entry
  (settled: a new attempt). (c) holds for every index the survivors hold.
- *A backing record cut away* was never acknowledged, so nothing after it was sent:
  a cut attempt record sent no output ((b): outputs go after their record's 200),
  a cut snapshot leaves the step to run again as a first attempt, as in (e).
- *Reads see more than the quorum holds*: an authority serves an entry as soon as
  it has it, before its followers confirm it. A decision taken from such a read
  could be undone by a failover — a backing tail recovery finishes (then cut: the
  step runs again, a duplicate), one of its own outputs recovery finds landed (then
  cut: lost), an input entry a step takes (then cut, and another entry takes its
  index: that one is skipped). So recovery reads the backing stream, and counts an
  output as landed, only once a majority of the copies reports them
  (:func:`~dynaq.processors.io.durable`, from the ring's listing of each stream's
  copies; else :class:`~dynaq.processors.io.NotDurable`, an interruption), and an
  input entry is taken only below the size a majority of its copies holds
  (:class:`~dynaq.processors.io.StreamInput`). A node alone answers without copies:
  its fsync is final, and nothing is waited for.

With ``acks = "leader"`` an append is acknowledged after the authority's fsync
alone, and a ``kill -9`` of the authority can cut acknowledged entries: an output
(the step recorded as delivered, the output gone: lost) or backing records (the
step runs again from an earlier snapshot while its output stands: a duplicate).
The guarantee in a ring needs ``quorum``. Beyond one failure at a time (a second
authority lost before its copies caught up, a network split) a ring can lose
acknowledged entries, and the guarantee with them.
``tests/processors/test_ring.py`` runs a worker through a node serving none of its
streams, and kills -9 the authority of its output and backing streams under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from dynaq.client import AsyncClient, DynaqError
from dynaq.processors import faults, records
from dynaq.processors.graph import Kind, Processor
from dynaq.processors.io import INDEX_TAKEN, Backing, code_of, durable
from dynaq.processors.steps import (
    Handles,
    Reader,
    Stats,
    Write,
    _call,
    error_writes,
    initial_tailers,
    plan,
    run_user,
)

SOURCE_IDLE_S = 0.2
"""How long a source that returned nothing waits before its next step."""


class ExactlyOnce:
    """One processor's exactly-once steps (its worker holds the backing stream's lease)."""

    def __init__(
        self,
        proc: Processor,
        client: AsyncClient,
        backing: Backing,
        reader: Reader,
        stats: Stats,
        stop: asyncio.Event,
    ) -> None:
        self.proc, self.client, self.backing = proc, client, backing
        self.reader, self.stats, self.stop = reader, stats, stop
        self.tailers = initial_tailers(proc)
        self._sizes: dict[str, int] = {}
        self._points: list[str] = []
        """Fault points of deferred records, fired once they are written."""
        self.replay: list[str] | None = None
        """``None``: the next step is a first attempt; else a retry, with the inputs its
        first attempt's alts (or imperative reads) took."""

    # -- recovery --------------------------------------------------------------------

    async def recover(self) -> None:
        """Bring the tailers to the first step not yet delivered (see the module)."""
        faults.point("recovery.start")
        # In a ring, read only what a quorum of the copies holds (see "In a ring").
        end = await self.client.stream_size(self.backing.name)
        await durable(self.client, self.backing.name, end)
        recs = await self.backing.since_last_snapshot(end)
        faults.point("recovery.read")
        self.replay = None
        if not recs or recs[0]["t"] != records.SNAPSHOT:
            base = recs[0]["tailers"] if recs else initial_tailers(self.proc)
            self.tailers = {**initial_tailers(self.proc), **base}
            return
        tailers: dict[str, int] = recs[0]["tailers"]
        h = records.delivery_hash(self.proc.id, tailers)
        for r in recs[1:]:
            if r["t"] == records.ATTEMPT_NIL and r["hash"] == h:
                self.tailers = r["next"]
                return
        attempts = [r for r in recs[1:] if r["t"] in records.ATTEMPTS and r["hash"] == h]
        if attempts:
            known: dict[int, set[int]] = {}
            for r in attempts:
                known.setdefault(int(r["slot"]), set()).add(int(r["index"]))
            await self._deliver(h, attempts[0]["writes"], attempts[0]["next"], known, True)
            self.tailers = attempts[0]["next"]
            return
        self.tailers = tailers
        self.replay = [r["tailer"] for r in recs[1:] if r["t"] == records.SNAPSHOT_ALTS]

    # -- persistence -----------------------------------------------------------------

    async def step(self) -> None:
        """Take, process and deliver one step (:class:`Stopping` before it took anything
        when the runner stops)."""
        p = self.proc
        tailers = dict(self.tailers)
        h = records.delivery_hash(p.id, tailers)
        replay = self.replay
        if p.kind is Kind.IMPERATIVE:
            if replay is None:
                await self._snapshot(tailers)
                replay = self.replay = []
            handles = Handles(
                h,
                self.reader,
                dict(tailers),
                self.stop,
                self._record_read,
                replay,
                frozenset(o.name for o in p.outputs),
            )
            try:
                await _call(p.fn, handles)
                pairs, error = handles.writes, False
            except Exception as exc:  # noqa: BLE001 - the user's code failed: handled
                if handles.broken is None:
                    pairs, error = error_writes(p, exc, handles.taken), True
            if handles.broken is not None:  # not the user's failure: interrupt the step
                raise handles.broken
            nxt = handles.next_tailers
        else:
            sel = await self.reader.select(tailers, self.stop, replay or None)
            if replay is None:
                faults.point("snapshot.before")
                self.backing.defer(records.snapshot(self.proc.id, tailers))
                self._points.append("snapshot.written")
                self.replay = []
            if p.kind is Kind.ALTS and not replay:
                assert sel.alts is not None
                self.backing.defer(records.snapshot_alts(sel.alts))
                self._points.append("alts.written")
            pairs, error = await run_user(p, sel, h)
            nxt = sel.next
        faults.point("fn.done")
        await self._deliver(h, plan(p, h, pairs, error), nxt, {}, False)
        self.stats.handled_errors += error
        self.tailers, self.replay = nxt, None
        if p.kind is Kind.SOURCE and not pairs:  # nothing to emit now: do not spin
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SOURCE_IDLE_S):
                    await self.stop.wait()

    async def _snapshot(self, tailers: records.Tailers) -> None:
        faults.point("snapshot.before")
        await self.backing.append(records.snapshot(self.proc.id, tailers))
        faults.point("snapshot.written")

    async def _append(self, record: dict[str, Any]) -> None:
        """Append ``record`` (and the step's deferred snapshot records before it)."""
        await self.backing.append(record)
        points, self._points = self._points, []
        for name in points:
            faults.point(name)

    async def _record_read(self, input: str) -> None:
        await self.backing.append(records.snapshot_alts(input))
        faults.point("alts.written")

    async def _deliver(
        self,
        h: str,
        writes: list[Write],
        nxt: records.Tailers,
        known: dict[int, set[int]],
        recovering: bool,
    ) -> None:
        if not writes:
            await self._append(records.attempt_nil(h, nxt))
            faults.point("nil.written")
        wrote = not writes
        for slot in range(len(writes)):
            got = known.setdefault(slot, set())
            wrote |= await self._deliver_slot(h, slot, writes, nxt, got, recovering)
        if wrote:  # (a recovery that found every slot landed delivered nothing new)
            self.stats.delivered += 1
            self.stats.last_delivery_s = time.time()

    async def _deliver_slot(
        self,
        h: str,
        slot: int,
        writes: list[Write],
        nxt: records.Tailers,
        known: set[int],
        recovering: bool,
    ) -> bool:
        """Land slot ``slot`` exactly once (see the module's proof sketch, (b)-(d));
        whether this call appended it (False: it had landed already)."""
        stream, entry = writes[slot]["stream"], writes[slot]["entry"]
        settled: set[int] = set()
        where = "recovery." if recovering else ""
        # A first try may use the size this worker's last append there left (sizes only
        # grow: a stale guess is an index already taken, which the append reports).
        guess = None if known else self._sizes.get(stream)
        while True:
            size = guess if guess is not None else await self.client.stream_size(stream)
            guess = None
            for i in sorted(known - settled):
                if i < size:
                    if await self._holds(stream, i, h, slot):
                        await durable(self.client, stream, i + 1)  # landed for good
                        return False
                    settled.add(i)
            if size not in known:
                record = records.attempt(h, slot, writes, size, nxt)
                await self._append(record)
                self.stats.attempts += 1
                known.add(size)
                faults.point(where + "attempt.written")
            try:
                await self.client.append(stream, [entry], expect_index=size)
            except DynaqError as exc:
                if code_of(exc) == INDEX_TAKEN:
                    continue  # another writer took it: settled now, go round
                raise
            self._sizes[stream] = size + 1
            faults.point(where + "output.written")
            return True

    async def _holds(self, stream: str, index: int, h: str, slot: int) -> bool:
        got: list[dict[str, Any]] = await self.client.read_stream(stream, index, 1)
        return bool(got) and records.is_delivery(got[0]["entry"], self.proc.id, h, slot)
