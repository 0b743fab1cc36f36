"""How the Riak store lays dynaq keys out as Riak objects, and how it picks among siblings.

Pure functions, no I/O. Message keys (``m`` + queue number + id, with the id's
top bit clear) live in the messages bucket under the hex of their 12 bytes,
with the secondary index ``id_int`` = their *position* ``queue << 63 | id``
(Dynamiq's ``id_int``, widened by the queue so that one index orders every
queue): a byte range of message keys is one 2i range of positions. Every other
key lives in the kv bucket under ``"k" + hex(key)``: hex keeps byte order, so
a byte range of keys is one range of Riak's ``$key`` index.

Each object carries two user-metadata fields: ``dq-v``, the store version of
the write, and ``dq-p``, the version it replaced (0 for a first write). See
:func:`current` for what they decide.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from dynaq.storage.cassandra_layout import END, ID_BITS, ID_MASK, is_message, msg_key, msg_pos
from dynaq.storage.riak_http import Content

INDEX = "id_int"
KEY_INDEX = "$key"
V = "dq-v"
P = "dq-p"
MAX_KV = "k" + "ff" * 512  # above every kv key the store writes (keys are far shorter)

__all__ = [
    "END",
    "INDEX",
    "KEY_INDEX",
    "Versions",
    "current",
    "from_kv",
    "from_msg",
    "is_message",
    "kv_name",
    "msg_name",
    "msg_pos",
    "position",
]


def msg_name(key: bytes) -> str:
    return key[1:].hex()


def from_msg(name: str) -> bytes:
    return b"m" + bytes.fromhex(name)


def position(key: bytes) -> int:
    """The ``id_int`` term of a message key: ``queue << 63 | id``."""
    return (int.from_bytes(key[1:5], "big") << ID_BITS) | int.from_bytes(key[5:13], "big")


def key_at(pos: int) -> bytes:
    return msg_key(pos >> ID_BITS, pos & ID_MASK)


def kv_name(key: bytes) -> str:
    return "k" + key.hex()


def from_kv(name: str) -> bytes:
    return bytes.fromhex(name[1:])


class Versions:
    """Store versions: ``(µs since 1970, strictly increasing here) << 10 | salt``.

    Unique across processes without coordination (the salt), and a conditional
    write's version is always above the one it replaces, so a lineage of
    successful writes has increasing ``dq-p`` values (what :func:`current` uses).
    """

    def __init__(self, salt: int) -> None:
        self._salt = salt & 0x3FF
        self._last_us = 0

    def next(self, above: int = 0) -> int:
        us = max(self._last_us + 1, time.time_ns() // 1000, (above >> 10) + 1)
        self._last_us = us
        return (us << 10) | self._salt


@dataclass(frozen=True, slots=True)
class Sibling:
    """A live sibling with its store versions."""

    value: bytes
    version: int
    parent: int


def siblings(contents: Sequence[Content]) -> list[Sibling]:
    """The live siblings (tombstones dropped: a write after a delete wins over it)."""
    out = []
    for c in contents:
        if c.deleted:
            continue
        out.append(Sibling(c.value, int(c.meta.get(V, "0")), int(c.meta.get(P, "0"))))
    return out


def current(live: Sequence[Sibling]) -> Sibling | None:
    """The sibling that is the key's value: the deepest lineage (greatest ``dq-p``),
    then, if that lineage still has several writes (see :func:`decided`), the
    oldest version among them.

    Siblings arise when two conditional writes read the same version and both
    reach Riak (its conditional check is not atomic): the one Riak applied first
    came back without siblings and won, the later ones came back with siblings,
    reported a lost race and wrote the first one back (see
    :meth:`riak_races.RiakRaces.settle`). A write that read the winner has a greater
    ``dq-p`` than the losers, so it outranks them. Which of several writes of
    the deepest lineage landed first the siblings do not say; the oldest
    version is a guess, right when the first to send was the first to land,
    so readers use it only after waiting for the losers' write-back.
    """
    if not live:
        return None
    return max(live, key=lambda s: (s.parent, -s.version))


def decided(live: Sequence[Sibling]) -> bool:
    """Whether the value is known: at most one write of the deepest lineage (copies
    of one write, as a write-back makes, count once). Otherwise a race's losers
    have not yet written the winner back, and only they know which it is."""
    if not live:
        return True
    deepest = max(s.parent for s in live)
    return len({s.version for s in live if s.parent == deepest}) == 1


def won(mine: int, live: Sequence[Sibling]) -> bool:
    """Whether the conditional write with version ``mine`` won: no other live sibling
    replaced the same version or a later one."""
    me = next((s for s in live if s.version == mine), None)
    if me is None:
        return False
    return all(s.parent < me.parent for s in live if s.version != mine)
