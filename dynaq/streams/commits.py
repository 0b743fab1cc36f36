"""Group commit of stream appends, on the I/O thread: every queued append is staged,
then each stream it touched is fsync'd once, so concurrent appends share fsyncs.

An append fails alone (its schema, its order keys, a replica's index out of
step); an fsync that fails fails every append staged in that stream.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from dynaq.errors import DynaqError, IndexTaken, ReplicaOutOfStep, StorageError
from dynaq.streams.stream import Staged, Stream

log = logging.getLogger(__name__)


@dataclass
class AppendJob:
    """One request's entries on their way to the I/O thread."""

    stream: Stream
    entries: list[Any]
    token: int | None
    future: asyncio.Future[Staged]
    expect: int | None = None
    """The index the first entry must get (a replica's append, or a publisher's
    conditional append); otherwise nothing is written."""
    replica: bool = False
    """A copy's append from its authority: no publisher lease applies."""


def io_commit(jobs: list[AppendJob], now_ms: int) -> list[Staged | BaseException]:
    """Stage every job, then fsync each stream once (I/O thread)."""
    results: list[Staged | BaseException] = []
    for job in jobs:
        try:
            _check_step(job)
            results.append(job.stream.io_stage(job.entries, now_ms))
        except DynaqError as exc:
            results.append(exc)
        except OSError as exc:
            results.append(StorageError(f"stream {job.stream.name!r}: write failed: {exc}"))
        except Exception:  # one bad job must not stop every later commit
            log.exception("stream append failed", extra={"stream": job.stream.name})
            results.append(StorageError(f"stream {job.stream.name!r}: append failed"))
    for stream in {id(j.stream): j.stream for j in jobs}.values():
        try:
            stream.io_sync()
        except OSError as exc:
            log.exception("stream fsync failed", extra={"stream": stream.name})
            failed = StorageError(f"stream {stream.name!r}: fsync failed: {exc}")
            results = [
                failed if j.stream is stream else r for j, r in zip(jobs, results, strict=True)
            ]
    return results


def _check_step(job: AppendJob) -> None:
    """A replica's (or a conditional append's) entries must start where the stream
    ends (I/O thread)."""
    if job.expect is not None and job.expect != job.stream.next_index:
        if not job.replica:
            raise IndexTaken(
                f"stream {job.stream.name!r} holds {job.stream.next_index} entries: "
                f"index {job.expect} is not the next one"
            )
        raise ReplicaOutOfStep(
            f"stream {job.stream.name!r}: this copy holds {job.stream.next_index} "
            f"entries, not {job.expect}"
        )
