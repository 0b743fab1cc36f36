"""Every storage key dynaq writes, in one place.

Messages of a queue are contiguous: ``m`` + queue number (4 bytes) + message
id (8 bytes, big-endian), so one partition's scan is one key range. Queue
names are not in message keys (they would waste space and pin names); a queue
gets a number when it is created and numbers are never reused, so a queue
re-created under the same name never sees the old one's messages.
"""

from __future__ import annotations

import struct

from dynaq.storage.base import MESSAGE_KEY_LEN as MESSAGE_KEY_LEN
from dynaq.storage.base import MESSAGE_PREFIX

CONFIG_QUEUE = b"c/q/"
CONFIG_TOPIC = b"c/t/"
PROCESSOR = b"c/p/"
"""Processors' last status reports (JSON, by name; :mod:`dynaq.services.processors`)."""
QUEUE_NUMBER_SEQ = b"c/seq/queue"
PURGE = b"c/purge/"
PARKED_INFLIGHT = b"c/parked/"
"""A lone node's in-flight table per queue, between a graceful stop and the next start."""
MESSAGE = MESSAGE_PREFIX
DEDUP = b"d/"
"""Dedup records of earlier releases (one per id, swept by scanning); read, never written."""
DEDUP_BUCKETED = b"e/"
"""Dedup records by time bucket: a whole bucket expires at once, by one range delete."""
BATCH_HEADER = b"b/h/"
BATCH_BLOCK = b"b/g/"
BATCH_REPAIR = b"b/r/"
"""Repair markers: an exact-batch operation that spans several records (an add,
an ack that empties blocks) leaves one while it runs, so the reaper finds and
finishes what a crash interrupted without scanning every batch."""
BATCH_COMPLETION = b"b/c/"
"""Completion records: written before the header update that completes a batch
and removed once the completion reached every listener (the relay's outbox)."""
BATCH_PUBLISHED = b"b/p/"
"""Published markers: written in the same store batch as a batch's completion
event, so a delivery retried after a crash finds it and does not publish twice."""
BATCH_FAILED = b"b/x/"
"""Failed items of exact batches (their messages were dead-lettered), by batch id and
item id; removed with the batch."""
BATCH_REAPER_LEASE = b"b/reaper"
"""The batch reaper's lease (a :class:`~dynaq.core.leases.CasLease` record, JSON).
Its earlier msgpack record lives on under ``b/lease``, which older nodes still
read and could not decode as JSON; under its own key the two never meet."""
ID_HIGH_WATER = b"w/hwm/"
WRITER_SLOT = b"w/slot/"
"""Writer-slot leases (``cluster/slots.py``)."""
DELAYED = b"y/"
"""Delayed messages until due: ``y/`` + due wall ms + queue number + message id, so
the due ones are one range scan from the start, whatever the backlog."""
TASK = b"t/"
"""Background queue tasks' progress records (redrive, purge), JSON, by task id."""
TASK_CANCEL = b"tc/"
"""A request to cancel a running task, by task id (outside the task records' range)."""
TASK_INDEX = b"tq/"
"""Background tasks by queue and kind, newest first (:func:`task_index`; outside the
task records' range): a queue's latest tasks are one short range scan."""
SCHEMA = b"c/schema"
"""The store's schema version (written by ``dynaq migrate``)."""

GROWTH_PREFIXES = (BATCH_HEADER, BATCH_BLOCK)
"""New records under these grow the store with user data, as messages do: a full
store refuses them (opening a batch, adding items) and keeps its reserve for
deletes, acks and the small records that run the node (config, leases, marks);
an overwrite of one (a batch ack) may use the reserve."""
ADDED_PREFIXES = (DEDUP, DEDUP_BUCKETED, DELAYED)
"""Records written once, as messages are (delayed messages), or in the store batch
of the messages they come with (dedup records): each put counts as growth, as a
message's does, without a read to tell a new key from an old one. A full store
refuses a delayed send as it refuses any other."""

_QID = struct.Struct(">I")
_MSG = struct.Struct(">cIQ")
if _MSG.size != MESSAGE_KEY_LEN:  # pragma: no cover - the shape is declared in storage.base
    raise ImportError("message key layout disagrees with dynaq.storage.base")
_BID = struct.Struct(">Q")


def id_high_water(writer_slot: int) -> bytes:
    """A writer slot's persisted id high-water mark (wall ms, decimal)."""
    return ID_HIGH_WATER + str(writer_slot).encode()


def queue_config(name: str) -> bytes:
    return CONFIG_QUEUE + name.encode()


def topic_config(name: str) -> bytes:
    return CONFIG_TOPIC + name.encode()


def purge_marker(queue_number: int) -> bytes:
    return PURGE + _QID.pack(queue_number)


def purge_number(key: bytes) -> int:
    return int(_QID.unpack_from(key, len(PURGE))[0])


def message(queue_number: int, message_id: int) -> bytes:
    return _MSG.pack(MESSAGE, queue_number, message_id)


_unpack_id = struct.Struct(">Q").unpack_from  # on every scanned row: 2.5x int.from_bytes(slice)


def message_id(key: bytes) -> int:
    return int(_unpack_id(key, 5)[0])


def queue_messages(queue_number: int) -> tuple[bytes, bytes]:
    """The key range ``[start, end)`` holding every message of a queue."""
    return MESSAGE + _QID.pack(queue_number), MESSAGE + _QID.pack(queue_number + 1)


def dedup(queue_number: int, dedup_id: str) -> bytes:
    """Dedup record of a queue: dedup id → message id and expiry."""
    return dedup_prefix(queue_number) + dedup_id.encode()


def dedup_prefix(queue_number: int) -> bytes:
    """What every :func:`dedup` key of a queue starts with (the id's UTF-8 follows)."""
    return DEDUP + _QID.pack(queue_number)


def dedup_in_bucket(bucket: int, queue_number: int, dedup_id: str) -> bytes:
    """Dedup record written in time bucket ``bucket`` (wall ms // window): id → message id, expiry.

    Nothing is ever written into a bucket once it is past, so expiring a bucket
    is a range delete that cannot race a write.
    """
    return dedup_bucket_prefix(bucket, queue_number) + dedup_id.encode()


def dedup_bucket_prefix(bucket: int, queue_number: int) -> bytes:
    """What every :func:`dedup_in_bucket` key of one queue and bucket starts with."""
    return DEDUP_BUCKETED + _BID.pack(bucket) + _QID.pack(queue_number)


def dedup_buckets_before(bucket: int) -> tuple[bytes, bytes]:
    """The key range of every dedup bucket older than ``bucket``."""
    return DEDUP_BUCKETED, DEDUP_BUCKETED + _BID.pack(bucket)


def dedup_queue_in_bucket(bucket: int, queue_number: int) -> tuple[bytes, bytes]:
    """The key range of one queue's dedup records in one bucket."""
    base = DEDUP_BUCKETED + _BID.pack(bucket)
    return base + _QID.pack(queue_number), base + _QID.pack(queue_number + 1)


def dedup_queue_range(queue_number: int) -> tuple[bytes, bytes]:
    return DEDUP + _QID.pack(queue_number), DEDUP + _QID.pack(queue_number + 1)


def batch_header(batch_id: int) -> bytes:
    """A tracked batch's header record (mode, user key, state, counts)."""
    return BATCH_HEADER + _BID.pack(batch_id)


def batch_id_of_header(key: bytes) -> int:
    return int(_BID.unpack_from(key, len(BATCH_HEADER))[0])


def batch_block(batch_id: int, block: bytes) -> bytes:
    """One block of an exact batch: its item count and bitfield (``block``: 16-byte UUID)."""
    return BATCH_BLOCK + _BID.pack(batch_id) + block


def batch_blocks(batch_id: int) -> tuple[bytes, bytes]:
    """The key range ``[start, end)`` of every block of a batch."""
    return BATCH_BLOCK + _BID.pack(batch_id), BATCH_BLOCK + _BID.pack(batch_id + 1)


def batch_repair(batch_id: int, nonce: bytes) -> bytes:
    """A repair marker of a batch (``nonce``: 16 random bytes, one per operation)."""
    return BATCH_REPAIR + _BID.pack(batch_id) + nonce


def batch_completion(batch_id: int, nonce: bytes) -> bytes:
    """A completion record of a batch (``nonce``: 16 random bytes, one per attempt)."""
    return BATCH_COMPLETION + _BID.pack(batch_id) + nonce


def batch_published(batch_id: int) -> bytes:
    """The marker of a batch whose completion event was published."""
    return BATCH_PUBLISHED + _BID.pack(batch_id)


def batch_id_after(prefix: bytes, key: bytes) -> int:
    """The batch id in a key ``prefix`` + batch id + ... (markers, completion records)."""
    return int(_BID.unpack_from(key, len(prefix))[0])


def task(task_id: str) -> bytes:
    """A background queue task's progress record."""
    return TASK + task_id.encode()


def task_cancel(task_id: str) -> bytes:
    """The request to cancel task ``task_id``, which its runner looks for after each page."""
    return TASK_CANCEL + task_id.encode()


_MAX_MS = 2**64 - 1


def task_index_prefix(queue: str, kind: str) -> bytes:
    """What every :func:`task_index` key of ``queue``'s tasks of ``kind`` starts with.

    NUL ends the name and the kind: neither can hold one (queue names are
    letters, digits, ``_.-``), so queue ``a``'s prefix is no prefix of ``ab``'s.
    """
    return TASK_INDEX + queue.encode() + b"\x00" + kind.encode() + b"\x00"


def task_index(queue: str, kind: str, started_ms: int, task_id: str) -> bytes:
    """The index entry of a task: :func:`task_index_prefix` + inverted start wall ms
    (8 bytes, big-endian ``2**64 - 1 - started_ms``) + task id, so an ascending scan
    of the prefix yields the queue's tasks of that kind newest first (ties by id)."""
    return task_index_prefix(queue, kind) + _BID.pack(_MAX_MS - started_ms) + task_id.encode()


def task_index_fields(prefix: bytes, key: bytes) -> tuple[int, str]:
    """``(started_ms, task_id)`` of a :func:`task_index` key that starts with ``prefix``."""
    (inverted,) = _BID.unpack_from(key, len(prefix))
    return _MAX_MS - int(inverted), key[len(prefix) + _BID.size :].decode()


def task_end() -> bytes:
    """The end of the task records' key range."""
    return TASK[:-1] + bytes([TASK[-1] + 1])


def batch_failed_item(batch_id: int, item: str) -> bytes:
    """The failure record of one item of a batch (``item``: its ``batchId:block:index``)."""
    return BATCH_FAILED + _BID.pack(batch_id) + item.encode()


def batch_failed_items(batch_id: int) -> tuple[bytes, bytes]:
    """The key range ``[start, end)`` of every failure record of a batch."""
    return BATCH_FAILED + _BID.pack(batch_id), BATCH_FAILED + _BID.pack(batch_id + 1)


_DELAYED = struct.Struct(">QIQ")


def delayed(due_ms: int, queue_number: int, message_id: int) -> bytes:
    """Where a delayed message waits until ``due_ms`` (then it moves to :func:`message`)."""
    return DELAYED + _DELAYED.pack(due_ms, queue_number, message_id)


def delayed_until(due_ms: int) -> tuple[bytes, bytes]:
    """The key range of every delayed message due before ``due_ms``."""
    return DELAYED, DELAYED + _DELAYED.pack(due_ms, 0, 0)


def delayed_fields(key: bytes) -> tuple[int, int, int]:
    """``(due_ms, queue_number, message_id)`` of a delayed message's key."""
    due, number, mid = _DELAYED.unpack_from(key, len(DELAYED))
    return int(due), int(number), int(mid)
