"""Segment files: the on-disk format of a stream, with no locking and no asyncio.

A stream is a directory of append-only segment files::

    <first:020>-<last:020>.<first order:020>-<last order:020>.seg   finalized
    active-<first:020>.seg                                          the one appended to

Every file starts with a header: ``DQSTRM01``, a u32 length, a u32 CRC32 and a
JSON object ``{"signature", "first_index", "created_ms"}``. Records follow, each
``<u32 payload length><u32 CRC32><u64 index><i64 order key><payload>`` where the
CRC covers index, order key and payload and the payload is the entry's JSON.
A finalized file ends with its sparse index (``<u64 index><i64 order><u64
offset>`` every few entries) and a 24-byte footer ``<u32 count><u32 CRC32><u64
data end>DQSTRIX1``. Finalized names carry first and last index and order key,
so a listener finds its file from names alone, then seeks with the sparse index.

Torn tails: a crash can leave a partly written record (or a partly written
trailer) at the end of the active file. :func:`recover_active` checks every
record's length and CRC from the start and truncates at the first bad one, so
a torn tail is never served; everything before it was fsync'd and acknowledged.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaq.errors import StreamUnavailable

MAGIC = b"DQSTRM01"
TRAILER_MAGIC = b"DQSTRIX1"
_HEAD = struct.Struct("<8sII")
RECORD = struct.Struct("<IIQq")
"""payload length, CRC32 of the rest, index, order key."""
_SPARSE = struct.Struct("<QqQ")
_FOOTER = struct.Struct("<IIQ8s")
_FINAL = re.compile(r"^(\d{20})-(\d{20})\.(\d{20})-(\d{20})\.seg$")
_ACTIVE = re.compile(r"^active-(\d{20})\.seg$")


def final_name(first: int, last: int, first_order: int, last_order: int) -> str:
    return f"{first:020d}-{last:020d}.{first_order:020d}-{last_order:020d}.seg"


def active_name(first: int) -> str:
    return f"active-{first:020d}.seg"


@dataclass
class Segment:
    """What is known of one segment file. Fields change only under the stream's lock,
    and only to reflect bytes that are already fsync'd (``count``, ``end``)."""

    path: Path
    first_index: int
    count: int
    first_order: int
    last_order: int
    finalized: bool
    data_start: int = 0
    end: int = 0
    created_ms: int = 0
    signature: str = ""
    sparse: list[tuple[int, int, int]] = field(default_factory=list)
    """(index, order key, offset) of every few entries, for seeking."""

    @property
    def last_index(self) -> int:
        return self.first_index + self.count - 1


def crc_of(record: memoryview | bytes, start: int, length: int) -> int:
    return zlib.crc32(memoryview(record)[start + 8 : start + RECORD.size + length])


def encode_record(index: int, order: int, payload: bytes) -> bytes:
    body = struct.pack("<Qq", index, order) + payload
    return struct.pack("<II", len(payload), zlib.crc32(body)) + body


def encode_header(signature: str, first_index: int, created_ms: int) -> bytes:
    meta = json.dumps(
        {"signature": signature, "first_index": first_index, "created_ms": created_ms}
    ).encode()
    return _HEAD.pack(MAGIC, len(meta), zlib.crc32(meta)) + meta


def read_header(path: Path) -> tuple[dict[str, Any], int] | None:
    """The header and the offset after it; ``None`` when the file is too short to hold
    one (torn at creation). Raises :class:`StreamUnavailable` when it is corrupt."""
    with open(path, "rb") as f:
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return None
        magic, length, crc = _HEAD.unpack(head)
        meta = f.read(length)
    if magic != MAGIC:
        raise StreamUnavailable(f"{path.name} is not a stream segment")
    if len(meta) < length:
        return None
    if zlib.crc32(meta) != crc:
        raise StreamUnavailable(f"{path.name} has a corrupt header")
    return json.loads(meta), _HEAD.size + length


def encode_trailer(sparse: list[tuple[int, int, int]], data_end: int) -> bytes:
    block = b"".join(_SPARSE.pack(*s) for s in sparse)
    return block + _FOOTER.pack(len(sparse), zlib.crc32(block), data_end, TRAILER_MAGIC)


def read_trailer(segment: Segment) -> None:
    """Load a finalized segment's data end and sparse index (once)."""
    if segment.end:
        return
    with open(segment.path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size - _FOOTER.size)
        count, crc, data_end, magic = _FOOTER.unpack(f.read(_FOOTER.size))
        if magic != TRAILER_MAGIC:
            raise StreamUnavailable(f"{segment.path.name} has no trailer")
        f.seek(size - _FOOTER.size - count * _SPARSE.size)
        block = f.read(count * _SPARSE.size)
    if zlib.crc32(block) != crc:
        raise StreamUnavailable(f"{segment.path.name} has a corrupt sparse index")
    segment.sparse = [_SPARSE.unpack_from(block, i * _SPARSE.size) for i in range(count)]
    segment.end = data_end


def list_segments(directory: Path) -> tuple[list[Segment], Path | None]:
    """The finalized segments (from names alone, in order) and the active file if any."""
    finals: list[Segment] = []
    active: Path | None = None
    for entry in sorted(directory.iterdir()):
        m = _FINAL.match(entry.name)
        if m:
            first, last, fo, lo = (int(g) for g in m.groups())
            finals.append(Segment(entry, first, last - first + 1, fo, lo, finalized=True))
        elif _ACTIVE.match(entry.name):
            if active is not None:
                raise StreamUnavailable(f"{directory.name} has two active segments")
            active = entry
    return finals, active


def recover_active(path: Path, every: int) -> tuple[Segment, int]:
    """Scan the active file, truncate a torn tail; return it and how many bytes were cut.

    ``every``: one sparse-index point per that many entries."""
    header = read_header(path)
    if header is None:
        raise StreamUnavailable(f"{path.name} has a torn header")
    meta, start = header
    data = path.read_bytes()
    view = memoryview(data)
    seg = Segment(
        path,
        int(meta["first_index"]),
        0,
        0,
        0,
        finalized=False,
        data_start=start,
        end=start,
        created_ms=int(meta["created_ms"]),
        signature=str(meta["signature"]),
    )
    off, expected = start, seg.first_index
    while off + RECORD.size <= len(data):
        length, crc, index, order = RECORD.unpack_from(data, off)
        if off + RECORD.size + length > len(data) or index != expected:
            break
        if zlib.crc32(view[off + 8 : off + RECORD.size + length]) != crc:
            break
        if seg.count == 0:
            seg.first_order = order
        elif order < seg.last_order:
            break
        if seg.count % every == 0:
            seg.sparse.append((index, order, off))
        seg.last_order = order
        seg.count += 1
        expected += 1
        off += RECORD.size + length
    cut = len(data) - off
    if cut:
        with open(path, "r+b") as f:
            f.truncate(off)
            os.fsync(f.fileno())
    seg.end = off
    return seg, cut


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _offset_of(path: Path, data_start: int, first: int, target: int) -> int:
    """The byte offset of record ``target`` in a segment whose first record is ``first``
    (records are contiguous from ``data_start``)."""
    off = data_start
    with open(path, "rb") as f:
        for _ in range(target - first):
            f.seek(off)
            head = f.read(RECORD.size)
            if len(head) < RECORD.size:
                break
            off += RECORD.size + RECORD.unpack(head)[0]
    return off


def cut_tail(directory: Path, size: int) -> int:
    """Drop every record from index ``size`` on: later files are removed, the file that
    holds index ``size`` is cut before it (a finalized one becomes the active file
    again); return how many entries were dropped. The caller reopens the stream."""
    finals, active_path = list_segments(directory)
    segments = list(finals)
    if active_path is not None:
        header = read_header(active_path)
        if header is not None:
            seg, _ = recover_active(active_path, 1 << 30)
            segments.append(seg)
        else:
            active_path.unlink()
    dropped = 0
    # Latest first: the active file is gone before a finalized one becomes active again.
    for seg in reversed(segments):
        end = seg.first_index + seg.count
        if end <= size:
            continue
        if seg.first_index >= size:
            seg.path.unlink()
            dropped += seg.count
            continue
        header = read_header(seg.path)
        assert header is not None  # a finalized file, or the active one read above
        off = _offset_of(seg.path, header[1], seg.first_index, size)
        dropped += end - size
        if seg.finalized:  # the kept part becomes the active file: it grows again
            data = seg.path.read_bytes()[:off]
            target = directory / active_name(seg.first_index)
            with open(target, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            seg.path.unlink()
        else:
            with open(seg.path, "r+b") as f:
                f.truncate(off)
                os.fsync(f.fileno())
    fsync_dir(directory)
    return dropped
