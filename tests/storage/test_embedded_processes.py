"""Several processes on one LMDB environment (a node's workers): conditional puts
stay exact across processes, and each process's versions carry its own tag."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from dynaq.storage.embedded import LmdbStore

# Each process adds 1 to a shared counter `rounds` times with put_if_version,
# retrying on a conflict, and checks every version it wrote carries its tag.
_INCREMENTER = textwrap.dedent(
    """
    import asyncio, sys
    from dynaq.storage.embedded import LmdbStore

    async def main(path, tag, tags, rounds):
        s = LmdbStore(path, map_size=64 * 1024**2, version_tag=tag, version_tags=tags)
        await s.open()
        conflicts = 0
        try:
            for _ in range(rounds):
                while True:
                    item = await s.get(b"counter")
                    value = int(item.value) if item else 0
                    if item is None:
                        v = await s.put_if_absent(b"counter", b"1")
                    else:
                        v = await s.put_if_version(b"counter", b"%d" % (value + 1), item.version)
                    if v is not None:
                        assert v % tags == tag, (v, tag)
                        break
                    conflicts += 1
        finally:
            await s.close()
        print(conflicts)

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    """
)


def _run_incrementers(path: Path, procs: int, rounds: int) -> list[int]:
    running = [
        subprocess.Popen(
            [sys.executable, "-c", _INCREMENTER, str(path), str(tag), str(procs), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for tag in range(procs)
    ]
    conflicts = []
    for p in running:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        conflicts.append(int(out))
    return conflicts


async def test_conditional_puts_from_several_processes_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "lmdb"
    procs, rounds = 3, 300
    conflicts = await asyncio.to_thread(_run_incrementers, path, procs, rounds)
    s = LmdbStore(path, map_size=64 * 1024**2)
    await s.open()
    try:
        item = await s.get(b"counter")
    finally:
        await s.close()
    assert item is not None
    # Every increment that was answered landed exactly once.
    assert int(item.value) == procs * rounds
    print(f"\nconflicts retried per process: {conflicts}")


async def test_versions_carry_the_process_tag_and_increase(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "lmdb", map_size=64 * 1024**2, version_tag=2, version_tags=3)
    await s.open()
    try:
        versions = [await s.put(b"k", b"v") for _ in range(50)]
        versions += await asyncio.gather(*(s.put(b"k%d" % i, b"v") for i in range(50)))
    finally:
        await s.close()
    assert all(v % 3 == 2 for v in versions)
    assert versions[:50] == sorted(set(versions[:50]))


# Opens the environment, takes LMDB's write lock (a write transaction left open),
# says so, and waits to be killed.
_LOCK_HOLDER = textwrap.dedent(
    """
    import sys, time, lmdb
    env = lmdb.open(sys.argv[1], map_size=64 * 1024**2, max_dbs=4)
    db = env.open_db(b"kv")
    txn = env.begin(write=True, db=db)
    txn.put(b"never", b"committed")
    print("holding", flush=True)
    time.sleep(60)
    """
)


def _kill_while_holding_the_write_lock(path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with proc.stdout:
        assert proc.stdout.readline() == b"holding\n"
        proc.kill()
        proc.wait(10)


async def test_a_process_killed_holding_the_write_lock_does_not_block_the_others(
    tmp_path: Path,
) -> None:
    """kill -9 of a worker in the middle of a commit: LMDB's robust mutex lets the
    next writer in (no hang), and the dead writer's transaction left nothing."""
    path = tmp_path / "lmdb"
    s = LmdbStore(path, map_size=64 * 1024**2)
    await s.open()
    try:
        await s.put(b"before", b"1")
        await asyncio.to_thread(_kill_while_holding_the_write_lock, path)
        await asyncio.wait_for(s.put(b"after", b"2"), timeout=10)
        assert await s.get(b"never") is None
        assert (await s.get(b"after")) is not None
    finally:
        await s.close()
