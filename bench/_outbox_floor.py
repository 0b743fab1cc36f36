"""The PostgreSQL floor of ``python -m bench outbox``: mark and purge, no publishing.

The relay's own SQL (:class:`dynaq.outbox.schema.Queries`: goharvest's
``UPDATE ... SET leader_id = $1 WHERE id IN (SELECT ... LIMIT $2) RETURNING ...``
and ``DELETE ... WHERE id = ANY($1)``), run the way the relay's term runs it:
one connection marks batches of ``mark_batch`` rows while fewer than
``max_in_flight`` are marked and not yet purged, and a second connection
purges, in one statement, every id marked since its last purge. Nothing is
published, so this is as fast as PostgreSQL lets these rows leave the table:
the yardstick ``records_per_s`` is held against (issue 18: ≥ 50 %).
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

from bench.common import Deadline, Timer, rate


async def mark_and_purge(
    mark_conn: Any,
    purge_conn: Any,
    rows: int,
    mark_batch: int,
    max_in_flight: int,
    deadline: Deadline,
    table: str = "outbox",
) -> dict[str, Any]:
    """Drain ``rows`` rows from ``table``; return what it took (bounded by ``deadline``)."""
    from dynaq.outbox.schema import Queries

    q = Queries.for_table(table)
    leader_id = uuid4()
    marked: list[int] = []
    ready = asyncio.Event()
    room = asyncio.Condition()
    in_flight = 0
    purged = 0
    marks = purges = 0
    finished = False

    def has_room() -> bool:
        return in_flight < max_in_flight

    async def marker() -> None:
        nonlocal in_flight, marks, finished
        while not deadline.expired():
            async with room:
                await room.wait_for(has_room)
            got = await mark_conn.fetch(q.mark, leader_id, mark_batch)
            marks += 1
            if not got:
                break
            marked.extend(r[0] for r in got)
            in_flight += len(got)
            ready.set()
        finished = True
        ready.set()

    async def purger() -> None:
        nonlocal in_flight, purged, purges
        while True:
            await ready.wait()
            ready.clear()
            if marked:
                ids, marked[:] = list(marked), []
                await purge_conn.execute(q.purge, ids)
                purges += 1
                purged += len(ids)
                async with room:
                    in_flight -= len(ids)
                    room.notify_all()
            if finished and not marked:
                return

    with Timer() as t:
        await asyncio.gather(marker(), purger())
    return {
        "rows": rows,
        "purged": purged,
        "seconds": round(t.elapsed_s, 3),
        "rows_per_s": round(rate(purged, t.elapsed_s), 1),
        "mark_statements": marks,
        "purge_statements": purges,
        "process_cpu_s": round(t.cpu_s, 2),
    }
