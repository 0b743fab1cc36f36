"""The transactional-outbox relay: PostgreSQL outbox rows → dynaq topics (goharvest's MP/R).

Import :class:`OutboxRelay` from :mod:`dynaq.outbox.relay` (it needs the
``outbox`` extra: ``pip install dynaq[outbox]``); :func:`stash` and
:func:`init_db` from :mod:`dynaq.outbox.schema` work on any asyncpg connection.
"""

from __future__ import annotations

from dynaq.config import OutboxConfig
from dynaq.outbox.schema import init_db, stash

__all__ = ["OutboxConfig", "init_db", "stash"]
