"""One writer process for ``python -m bench lmdb_procs``: durable LMDB commits for a while.

``python -m bench._lmdb_writer PATH SECONDS BATCH TAG`` opens the environment at
PATH (as the embedded store does: ``sync=True``, ``metasync=True``), commits
BATCH appending 256-byte puts per transaction until SECONDS have passed, and
prints ``{"commits", "puts", "wall_s", "p50_ms", "p99_ms"}`` as JSON.
"""

from __future__ import annotations

import json
import struct
import sys
import time

import lmdb

from bench.common import percentiles


def main(path: str, seconds: float, batch: int, tag: int) -> dict[str, float]:
    env = lmdb.open(path, map_size=8 * 1024**3, max_dbs=4, sync=True, metasync=True)
    db = env.open_db(b"kv")
    value = b"x" * 256
    seq = 0
    lat: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        t0 = time.perf_counter()
        with env.begin(write=True, db=db) as txn:
            cur = txn.cursor()
            # Keys append within this writer's own range, as a lane does.
            cur.putmulti([(struct.pack(">BQ", tag, seq + i), value) for i in range(batch)])
        lat.append((time.perf_counter() - t0) * 1000)
        seq += batch
    wall = time.monotonic() - start
    env.close()
    p = percentiles(lat)
    return {
        "commits": len(lat),
        "puts": seq,
        "wall_s": wall,
        "p50_ms": p["p50"],
        "p99_ms": p["p99"],
    }


if __name__ == "__main__":
    a = sys.argv[1:]
    print(json.dumps(main(a[0], float(a[1]), int(a[2]), int(a[3]))))
