"""Reading a stream from a starting point, as formatted bytes: one listener's cursor.

A :class:`Cursor` runs on a reader thread (never the event loop): each
:meth:`Cursor.read` call reads at most about ``chunk_bytes`` of fsync'd records
from the segment files, checks each record's CRC (a corrupt record is refused,
never served), applies the stop conditions and formats the entries. Every
listener has its own cursor and its own file handles, so a slow listener only
falls behind: it holds no buffer the publisher or another listener waits on.
"""

from __future__ import annotations

import bisect
import json
import zlib
from dataclasses import dataclass
from io import BufferedReader
from typing import Any

import msgpack

from dynaq.errors import StreamUnavailable
from dynaq.streams.segments import RECORD, Segment, read_trailer
from dynaq.streams.stream import Stream

FORMATS = ("jsonl", "array", "entries_only", "msgpack")
CONTENT_TYPES = {
    "jsonl": "text/plain",
    "array": "application/json",
    "entries_only": "application/x-ndjson",
    "msgpack": "application/x-msgpack-seq",
}


@dataclass
class Stops:
    """When a listener ends by itself (``None``: never by that rule)."""

    n: int | None = None
    """After this many entries."""
    until: int | None = None
    """Before the first entry whose order key is above this."""
    max_bytes: int | None = None
    """After the entry that brings the bytes written to this many or more."""


@dataclass
class Chunk:
    data: bytes
    entries: int
    done: bool
    """A stop condition was met: the listener ends after writing ``data``."""
    caught_up: bool
    """Everything published so far has been read."""


class Cursor:
    """Where one listener is: next index, open file, offset. Not thread-safe: one
    reader thread at a time (the listener awaits each read)."""

    def __init__(
        self, stream: Stream, index: int, min_order: int, fmt: str, stops: Stops, chunk_bytes: int
    ) -> None:
        self.stream = stream
        self.index = index
        self.min_order = min_order
        self.fmt = fmt
        self.stops = stops
        self.chunk_bytes = chunk_bytes
        self.sent_entries = 0
        self.sent_bytes = 0
        self._segment: Segment | None = None
        self._file: BufferedReader | None = None
        self._pos = 0
        self._packer = msgpack.Packer(use_bin_type=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _locate(self, segments: list[Segment]) -> Segment:
        """The segment holding ``self.index`` (moving it to the oldest kept entry if
        retention dropped it), or the active one past the end."""
        firsts = [s.first_index for s in segments]
        if self.index < firsts[0]:
            self.index = firsts[0]
        i = bisect.bisect_right(firsts, self.index) - 1
        seg = segments[i]
        with self.stream.lock:
            count, finalized = seg.count, seg.finalized
        if self.index >= seg.first_index + count and finalized and i + 1 < len(segments):
            return segments[i + 1]
        return seg

    def _open(self, seg: Segment) -> None:
        self.close()
        for _ in range(3):
            with self.stream.lock:
                path, finalized = seg.path, seg.finalized
            try:
                if finalized:
                    read_trailer(seg)
                self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
                break
            except FileNotFoundError:
                continue  # renamed by finalize (or dropped by retention) meanwhile
        else:
            raise StreamUnavailable(f"stream {self.stream.name!r}: {path.name} vanished")
        # Seek with the sparse index: the last point every entry before which is to be
        # skipped (index below the cursor's, or order key below ``since``). Both grow
        # along the file, so the points that qualify are a prefix.
        with self.stream.lock:
            sparse = list(seg.sparse)
        pos = seg.data_start
        for index, order, offset in sparse:
            if index > self.index and order >= self.min_order:
                break
            pos = offset
        self._segment, self._pos = seg, pos

    def read(self) -> Chunk:
        """Read and format the next records (at most about ``chunk_bytes``)."""
        segments, _ = self.stream.snapshot()
        seg = self._locate(segments)
        if seg is not self._segment or self._file is None:
            self._open(seg)
        with self.stream.lock:
            end, finalized = seg.end, seg.finalized
            last_segment = seg is segments[-1]
        if finalized:
            read_trailer(seg)
            end = seg.end
        assert self._file is not None
        parts: list[bytes] = []
        entries, done = 0, False
        while self._pos < end and not done and len(parts) < 65536:
            self._file.seek(self._pos)
            want = min(end - self._pos, self.chunk_bytes)
            buf = self._file.read(want)
            if len(buf) >= RECORD.size:
                length = RECORD.unpack_from(buf, 0)[0]
                if RECORD.size + length > len(buf):  # one record bigger than a chunk
                    buf += self._file.read(RECORD.size + length - len(buf))
            used, n, done = self._parse(buf, parts)
            if used == 0 and not done:  # (done: the first record is past a stop, as `until`)
                raise StreamUnavailable(f"stream {self.stream.name!r}: unreadable record")
            self._pos += used
            entries += n
            if sum(len(p) for p in parts) >= self.chunk_bytes:
                break
        caught_up = False
        if self._pos >= end and not done:
            if finalized and not last_segment:
                self.close()
                self._segment = None
            else:
                caught_up = True
        return Chunk(b"".join(parts), entries, done, caught_up)

    def _parse(self, buf: bytes, parts: list[bytes]) -> tuple[int, int, bool]:
        """Format the records in ``buf``; return bytes used, entries emitted, done."""
        off, n, size = 0, 0, len(buf)
        view = memoryview(buf)
        stops = self.stops
        while off + RECORD.size <= size:
            length, crc, index, order = RECORD.unpack_from(buf, off)
            rec_end = off + RECORD.size + length
            if rec_end > size:
                break
            if zlib.crc32(view[off + 8 : rec_end]) != crc:
                raise StreamUnavailable(
                    f"stream {self.stream.name!r}: record {index} fails its checksum"
                )
            off_next = rec_end
            if index < self.index or order < self.min_order:
                off = off_next
                continue
            if stops.until is not None and order > stops.until:
                return off, n, True
            payload = buf[off + RECORD.size : rec_end]
            piece = self._format(index, order, payload)
            parts.append(piece)
            n += 1
            self.index = index + 1
            self.sent_entries += 1
            self.sent_bytes += len(piece)
            off = off_next
            if (stops.n is not None and self.sent_entries >= stops.n) or (
                stops.max_bytes is not None and self.sent_bytes >= stops.max_bytes
            ):
                return off, n, True
        return off, n, False

    def _format(self, index: int, order: int, payload: bytes) -> bytes:
        fmt = self.fmt
        if fmt == "jsonl":
            return b'{"index": %d, "order": %d}\t%s\n' % (index, order, payload)
        if fmt == "entries_only":
            return payload + b"\n"
        if fmt == "array":
            sep = b"," if self.sent_entries else b""
            return b'%s{"index":%d,"order":%d,"entry":%s}' % (sep, index, order, payload)
        entry: Any = json.loads(payload)
        packed: bytes = self._packer.pack({"index": index, "order": order, "entry": entry})
        return packed
