"""One stream's files and state: the writer side, run on the service's I/O thread.

Threads: every method named ``io_*`` runs on the single I/O thread of
:class:`~dynaq.streams.service.StreamService` (so writes to one stream are
serialized without a lock); readers run on other threads and see only what
``lock`` publishes, which is only ever what has been fsync'd. The event loop
never takes ``lock`` (it must not block): it reads the ``segments`` list, which
is replaced rather than changed, and ``size``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from io import BufferedWriter
from pathlib import Path
from typing import Any

import orjson

from dynaq.config.sections import StreamsConfig
from dynaq.errors import InvalidInput, OrderKeyDecreased, PayloadTooLarge, StreamUnavailable
from dynaq.streams.schema import EntryType, EntryValidator
from dynaq.streams.segments import (
    RECORD,
    Segment,
    active_name,
    cut_tail,
    encode_header,
    encode_record,
    encode_trailer,
    final_name,
    fsync_dir,
    list_segments,
    read_header,
    recover_active,
)

log = logging.getLogger(__name__)
META = "stream.json"


def _entry_json(entry: Any, where: str) -> bytes:
    """An entry's compact UTF-8 JSON: orjson (about 10x faster), or the standard
    library for what orjson refuses but JSON holds (integers beyond 64 bits)."""
    try:
        return orjson.dumps(entry)
    except TypeError:
        pass
    try:
        return json.dumps(
            entry, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except (TypeError, ValueError):
        raise InvalidInput(f"{where} is not JSON (msgpack bytes or ext values?)") from None


@dataclass
class Staged:
    """What one append wrote (not yet fsync'd)."""

    first_index: int
    count: int


class Stream:
    """A stream's segments, its published size and its writer state."""

    def __init__(
        self, directory: Path, name: str, meta: dict[str, Any], config: StreamsConfig
    ) -> None:
        self.directory = directory
        self.name = name
        self.config = config
        self.type = EntryType(meta["schema"], meta["order_key"], meta["signature"])
        self.signatures: list[str] = list(meta["signatures"])
        self.publisher_token: int = int(meta.get("publisher_token", 0))
        self.created_ms: int = int(meta["created_ms"])
        self.epoch: int = int(meta.get("epoch", 0))
        """In a ring: the authority's epoch this copy was last written under (0: unknown)."""
        self.retention: dict[str, float] = dict(meta.get("retention") or {})
        """This stream's own ``max_bytes`` / ``max_age_s`` (absent: the node's)."""
        self.validator: EntryValidator = self.type.validator()
        self.lock = threading.Lock()
        self.segments: list[Segment] = []
        self.size = 0
        """Entries fsync'd (the next index), published under ``lock``."""
        self.last_order = -1
        # Writer state (I/O thread only): staged beyond what is published.
        self._file: BufferedWriter | None = None
        self._next = 0
        self._last_order = -1
        self._w_count = 0
        self._w_end = 0
        self._w_last_order = -1
        self._w_first_order = -1
        self._w_sparse: list[tuple[int, int, int]] = []
        self._dirty = False
        self.fsyncs = 0
        """Data fsyncs since the node started (group commit makes it far fewer than appends)."""

    # -- meta ------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schema": self.type.schema,
            "order_key": self.type.order_key,
            "signature": self.type.signature,
            "signatures": self.signatures,
            "publisher_token": self.publisher_token,
            "created_ms": self.created_ms,
            "epoch": self.epoch,
            "retention": self.retention,
        }

    def io_write_meta(self) -> None:
        """Replace ``stream.json`` atomically and durably."""
        tmp = self.directory / (META + ".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(self.meta(), sort_keys=True).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / META)
        fsync_dir(self.directory)

    def io_set_retention(self, retention: dict[str, float], now_ms: int) -> None:
        self.retention = dict(retention)
        self.io_write_meta()
        self._io_retain(now_ms)

    def io_extend(self, new: EntryType) -> None:
        self.type = new
        self.validator = new.validator()
        self.signatures.append(new.signature)
        self.io_write_meta()

    # -- opening -------------------------------------------------------------------

    def io_open(self, now_ms: int) -> int:
        """Check every segment's signature, recover the active file; return bytes cut
        from a torn tail. Raises :class:`StreamUnavailable` when a file carries a
        signature this stream never had (it refuses to open)."""
        finals, active = list_segments(self.directory)
        # Retention may have dropped the oldest files: the first one left sets the start.
        expected = finals[0].first_index if finals else 0
        for seg in finals:
            header = read_header(seg.path)
            if header is None:
                raise StreamUnavailable(f"stream {self.name!r}: {seg.path.name} is truncated")
            self._check_signature(str(header[0]["signature"]), seg.path)
            seg.data_start = header[1]
            seg.signature = str(header[0]["signature"])
            seg.created_ms = int(header[0]["created_ms"])
            if seg.first_index != expected:
                raise StreamUnavailable(
                    f"stream {self.name!r}: {seg.path.name} should start at index {expected}"
                )
            expected = seg.last_index + 1
        cut = 0
        seg_active: Segment | None = None
        if active is not None:
            if read_header(active) is None:
                active.unlink()  # torn while being created: it held nothing
            else:
                seg_active, cut = recover_active(active, self.config.sparse_index_every)
                self._check_signature(seg_active.signature, active)
        if seg_active is None:
            seg_active = self._io_new_active(expected, now_ms)
        self.segments = [*finals, seg_active]
        self.size = seg_active.first_index + seg_active.count
        last = seg_active if seg_active.count else (finals[-1] if finals else None)
        self.last_order = last.last_order if last is not None else -1
        self._start_writer(seg_active)
        return cut

    def _check_signature(self, found: str, path: Path) -> None:
        if found not in self.signatures:
            raise StreamUnavailable(
                f"stream {self.name!r} refuses to open: {path.name} carries signature "
                f"{found[:12]}…, which is not the signature of its declared schema "
                f"({self.type.signature[:12]}…)"
            )

    def _io_new_active(self, first: int, now_ms: int) -> Segment:
        path = self.directory / active_name(first)
        header = encode_header(self.type.signature, first, now_ms)
        with open(path, "wb") as f:
            f.write(header)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)
        return Segment(
            path,
            first,
            0,
            -1,
            -1,
            finalized=False,
            data_start=len(header),
            end=len(header),
            created_ms=now_ms,
            signature=self.type.signature,
        )

    def _start_writer(self, active: Segment) -> None:
        self._file = open(active.path, "ab")  # noqa: SIM115 - held until close/finalize
        self._next = self.size
        self._last_order = self.last_order
        self._w_count = active.count
        self._w_end = active.end
        self._w_first_order = active.first_order
        self._w_last_order = active.last_order
        self._w_sparse = []

    def io_close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- appending --------------------------------------------------------------

    @property
    def next_index(self) -> int:
        """The index the next staged entry gets (I/O thread)."""
        return self._next

    def io_stage(self, entries: list[Any], now_ms: int) -> Staged:
        """Validate ``entries`` and write them (not yet fsync'd). All or none: a bad
        entry raises before anything is written."""
        first = self._next
        orders: list[int] = []
        payloads: list[bytes] = []
        last = self._last_order
        order_of = self.validator.order_of
        limit = self.config.max_entry_bytes
        for i, entry in enumerate(entries):
            where = f"entries[{i}]"
            order = order_of(entry, first + i, where)
            if order < last:
                raise OrderKeyDecreased(
                    f"{where} (index {first + i}): order key {order} is below the previous "
                    f"entry's {last}; order keys must not decrease"
                )
            payload = _entry_json(entry, where)
            if len(payload) > limit:
                raise PayloadTooLarge(f"{where} is {len(payload)} bytes; the limit is {limit}")
            last = order
            orders.append(order)
            payloads.append(payload)
        for i, (order, payload) in enumerate(zip(orders, payloads, strict=True)):
            self._io_write(first + i, order, payload, now_ms)
        self._last_order = last
        return Staged(first, len(entries))

    def _io_write(self, index: int, order: int, payload: bytes, now_ms: int) -> None:
        active = self.segments[-1]
        c = self.config
        if self._w_count and (
            self._w_end - active.data_start + RECORD.size + len(payload) > c.segment_max_bytes
            or self._w_count >= c.segment_max_entries
            or now_ms - active.created_ms >= c.segment_max_age_s * 1000
        ):
            self._io_finalize(now_ms)
        assert self._file is not None
        if self._w_count % c.sparse_index_every == 0:
            self._w_sparse.append((index, order, self._w_end))
        if self._w_count == 0:
            self._w_first_order = order
        record = encode_record(index, order, payload)
        self._file.write(record)
        self._w_end += len(record)
        self._w_count += 1
        self._w_last_order = order
        self._next = index + 1
        self._dirty = True

    def io_sync(self) -> None:
        """fsync what was staged, then publish it to readers."""
        if not self._dirty:
            return
        assert self._file is not None
        self._file.flush()
        os.fsync(self._file.fileno())
        self.fsyncs += 1
        self._dirty = False
        self._publish()

    def _publish(self) -> None:
        active = self.segments[-1]
        with self.lock:
            active.count = self._w_count
            active.end = self._w_end
            active.first_order = self._w_first_order
            active.last_order = self._w_last_order
            active.sparse.extend(self._w_sparse)
            self.size = self._next
            self.last_order = self._last_order
        self._w_sparse = []

    def _io_finalize(self, now_ms: int) -> None:
        """Seal the active file (trailer, fsync, rename to its final name) and start a new one."""
        assert self._file is not None
        active = self.segments[-1]
        sparse = [*active.sparse, *self._w_sparse]
        self._file.write(encode_trailer(sparse, self._w_end))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._dirty = False
        self._publish()
        last = active.first_index + active.count - 1
        path = self.directory / final_name(
            active.first_index, last, active.first_order, active.last_order
        )
        os.rename(active.path, path)
        new = self._io_new_active(self._next, now_ms)  # fsyncs the directory too
        with self.lock:
            active.path = path
            active.finalized = True
            self.segments = [*self.segments, new]
        self._start_writer(new)
        self._io_retain(now_ms)

    def retention_limits(self) -> tuple[int, float]:
        """``(max_bytes, max_age_s)`` this stream keeps (0: no limit): its own where it
        was declared with them, else the node's ``retention_max_*``."""
        c = self.config
        max_bytes = int(self.retention.get("max_bytes", c.retention_max_bytes))
        return max_bytes, float(self.retention.get("max_age_s", c.retention_max_age_s))

    def _io_retain(self, now_ms: int) -> None:
        """Drop the oldest finalized files past the retention limits (both 0 = keep
        everything, the default). The newest finalized file is always kept: the
        records just before the active file (a processor's last snapshot, a reader's
        resume point at the tail) outlive any limit until newer ones follow them."""
        max_bytes, max_age_s = self.retention_limits()
        if not max_bytes and not max_age_s:
            return
        while True:
            with self.lock:
                finals = [s for s in self.segments if s.finalized]
                if len(finals) < 2:
                    return
                total = sum(s.path.stat().st_size for s in finals)
                oldest = finals[0]
                too_big = bool(max_bytes) and total > max_bytes
                too_old = bool(max_age_s) and now_ms - oldest.created_ms > max_age_s * 1000
                if not (too_big or too_old):
                    return
                self.segments = [s for s in self.segments if s is not oldest]
            oldest.path.unlink(missing_ok=True)
            log.info(
                "stream segment dropped by retention",
                extra={"stream": self.name, "segment": oldest.path.name},
            )

    def io_truncate(self, size: int, now_ms: int) -> int:
        """Drop the entries from index ``size`` on (a copy's tail its new authority never
        had); return how many. Listeners must have been stopped."""
        if size >= self.size:
            return 0
        self.io_close()
        dropped = cut_tail(self.directory, size)
        self.io_open(now_ms)
        return dropped

    def snapshot(self) -> tuple[list[Segment], int]:
        """The segments and the size, without the lock (the event loop calls this): the
        list is replaced, never changed in place, and the size is read first, so the
        segments seen hold at least ``size`` entries."""
        size = self.size
        return self.segments, size
