"""The event-loop half of stream group commit: appends queue up here, and one task
hands them to the I/O thread in groups (:func:`~dynaq.streams.commits.io_commit` is
the thread's half, which stages them and fsyncs each stream once).

Guarantees:

- **Groups, in order.** While one group is on the I/O thread, new appends queue
  up and all go together in the next one, in the order they were submitted, so
  concurrent appends share one fsync.
- **Admitted at commit time.** ``admit`` runs for every job on the loop just
  before its group leaves (a stream may have been deleted, or its publisher
  lease taken over, since the job was queued); a job it refuses fails with
  that error and writes nothing.
- **Every future is settled** with the job's result or its error, and only
  then is ``committed`` told, once per stream the group wrote, so whoever it
  wakes reads only what is durable.
- :meth:`GroupCommit.stop` commits everything queued before it ends the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from dynaq.clock import Clock
from dynaq.errors import DynaqError
from dynaq.streams.commits import AppendJob, io_commit
from dynaq.streams.stream import Staged, Stream
from dynaq.tasks import cancel_and_wait


class GroupCommit:
    """Queues append jobs and commits them in groups on the ``io`` thread."""

    def __init__(
        self,
        io: ThreadPoolExecutor,
        clock: Clock,
        admit: Callable[[AppendJob], None],
        committed: Callable[[Stream], None],
    ) -> None:
        """``admit`` raises a :class:`~dynaq.errors.DynaqError` for a job that may no
        longer be written; ``committed`` hears of each stream a group wrote."""
        self._io = io
        self._clock = clock
        self._admit = admit
        self._committed = committed
        self._pending: list[AppendJob] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._commit_loop(), name="streams-commit")

    async def submit(self, job: AppendJob) -> Staged:
        """Queue ``job`` for the next group; its result once durable (or its error)."""
        self._pending.append(job)
        self._wake.set()
        return await job.future

    async def stop(self) -> None:
        """Commit what is queued, then end the task."""
        while self._pending:
            self._wake.set()
            await asyncio.sleep(0)
            # The I/O thread runs one thing at a time: once this no-op has run,
            # the group in flight before it has too.
            await asyncio.get_running_loop().run_in_executor(self._io, lambda: None)
        await cancel_and_wait(self._task)

    async def _commit_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            jobs, self._pending = self._pending, []
            if not jobs:
                continue
            checked: list[AppendJob] = []
            for job in jobs:
                try:
                    self._admit(job)
                    checked.append(job)
                except DynaqError as exc:
                    if not job.future.done():
                        job.future.set_exception(exc)
            results = await loop.run_in_executor(
                self._io, io_commit, checked, self._clock.wall_ms()
            )
            for job, result in zip(checked, results, strict=True):
                if job.future.done():
                    continue
                if isinstance(result, BaseException):
                    job.future.set_exception(result)
                else:
                    job.future.set_result(result)
            for stream in {id(j.stream): j.stream for j in checked}.values():
                self._committed(stream)
