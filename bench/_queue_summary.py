"""The JSON line of ``bench queue``: each phase's figures, the ratios to JetStream,
the client's own cost, and the same-run floors (see :mod:`bench.queue`)."""

from __future__ import annotations

from typing import Any

from bench._queue_clients import BATCH, BODY_BYTES, PhaseResult
from bench._queue_plan import Options, paired_ratios, scaling


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b > 0 else 0.0


def summary(
    o: Options,
    res: dict[str, PhaseResult],
    disk: dict[str, dict[str, float]],
    runs: dict[str, list[PhaseResult]],
) -> dict[str, Any]:
    def fig(key: str) -> float:
        r = res.get(key)
        return round(r.msgs_per_s, 1) if r else 0.0

    def lat(key: str, p: str) -> float:
        r = res.get(key)
        return round(r.latency_ms[p], 3) if r else 0.0

    def cores(key: str, who: str) -> float:
        r = res.get(key)
        if r is None:
            return 0.0
        return round((r.server_cpu_s if who == "server" else r.client_cpu_s) / r.wall_s, 2)

    out: dict[str, Any] = {
        "scenario": "queue",
        "quick": o.quick,
        "body_bytes": BODY_BYTES,
        "batch_size": BATCH,
        "concurrency": o.concurrency,
        "client_procs": o.procs,
        "enqueue_batch_msgs_per_s": fig("dq_batch"),
        "receive_delete_msgs_per_s": fig("dq_consume"),
        "enqueue_single_msgs_per_s": fig("dq_single"),
        "rtt_p50_ms": lat("dq_rtt", "p50"),
        "rtt_p99_ms": lat("dq_rtt", "p99"),
        "peer": "nats-jetstream" if "js_batch" in res else "none",
        "peer_publish_batch_msgs_per_s": fig("js_batch"),
        "peer_consume_ack_msgs_per_s": fig("js_consume"),
        "peer_publish_single_msgs_per_s": fig("js_single"),
        "peer_rtt_p50_ms": lat("js_rtt", "p50"),
        "peer_rtt_p99_ms": lat("js_rtt", "p99"),
        "ratio_vs_peer": _ratio(fig("dq_batch"), fig("js_batch")),
        "ratio_receive_delete_vs_peer": _ratio(fig("dq_consume"), fig("js_consume")),
        "ratio_single_vs_peer": _ratio(fig("dq_single"), fig("js_single")),
        # Latency: > 1 means dynaq's round trip is that many times JetStream's.
        "ratio_rtt_p50_vs_peer": _ratio(lat("dq_rtt", "p50"), lat("js_rtt", "p50")),
        "ratio_rtt_p99_vs_peer": _ratio(lat("dq_rtt", "p99"), lat("js_rtt", "p99")),
        "errors": sum(r.errors for r in res.values()),
    }
    if o.library:
        out["client"] = "dynaq"
        out["client_enqueue_batch_msgs_per_s"] = fig("lb_batch")
        out["client_receive_delete_msgs_per_s"] = fig("lb_consume")
        out["client_enqueue_single_msgs_per_s"] = fig("lb_single")
        out["client_rtt_p50_ms"] = lat("lb_rtt", "p50")
        out["client_ratio_batch"] = _ratio(fig("lb_batch"), fig("dq_batch"))
        out["client_ratio_receive_delete"] = _ratio(fig("lb_consume"), fig("dq_consume"))
        out["client_ratio_single"] = _ratio(fig("lb_single"), fig("dq_single"))
        if o.rounds > 1:
            for what, name in (
                ("batch", "batch"),
                ("consume", "receive_delete"),
                ("single", "single"),
            ):
                if f"lb_{what}" in runs:
                    ratios, median = paired_ratios(runs[f"lb_{what}"], runs[f"dq_{what}"])
                    out[f"client_ratio_{name}_rounds"] = ratios
                    out[f"client_ratio_{name}_median"] = median
    for key, r in res.items():
        # The client's own cost, whatever the shared machine did to the server.
        out[f"client_cpu_us_per_msg_{key}"] = (
            round(r.client_cpu_s / r.count * 1e6, 2) if r.count else 0.0
        )
    for key in res:
        out[f"server_cores_{key}"] = cores(key, "server")
        out[f"client_cores_{key}"] = cores(key, "client")
    for when in ("before", "after"):
        out[f"fsync_{when}_p50_ms"] = round(disk[when]["p50"], 3)
        out[f"fsync_{when}_p99_ms"] = round(disk[when]["p99"], 3)
    out.update(_floors(res, disk))
    if o.workers > 1:
        out.update(scaling(o.workers, res))
        out["layout"] = o.layout
    out["counts"] = {k: r.count for k, r in res.items()}
    return out


RTT_SLACK_MS = 0.3
"""What issue 18 allows a single enqueue's round trip over its floor."""


def _floors(res: dict[str, PhaseResult], disk: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The same-run floors and dynaq's distance to them (see the module docstring)."""

    def p50(key: str) -> float:
        r = res.get(key)
        return r.latency_ms["p50"] if r else 0.0

    def rate_of(key: str) -> float:
        r = res.get(key)
        return r.msgs_per_s if r else 0.0

    def client_cpu_per_msg(key: str) -> float:
        """Client CPU per message in µs (0 when the phase did not run)."""
        r = res.get(key)
        return r.client_cpu_s / r.count * 1e6 if r and r.count else 0.0

    # The median of the three probes (start, just before the round trips, end):
    # one probe caught in a neighbour's write burst must not move the floor.
    probes = sorted(disk[k]["p50"] for k in ("before", "rtt", "after") if k in disk)
    fsync = probes[len(probes) // 2]
    http = p50("fl_rtt")
    floor = fsync + http + RTT_SLACK_MS
    return {
        "floor_fdatasync_p50_ms": round(fsync, 3),
        "fsync_rtt_p50_ms": round(disk["rtt"]["p50"], 3) if "rtt" in disk else 0.0,
        "floor_lmdb_commit_p50_ms": round(disk["lmdb_commit"]["p50"], 3),
        "floor_http_rtt_p50_ms": round(http, 3),
        "floor_http_single_msgs_per_s": round(rate_of("fl_single"), 1),
        "rtt_floor_ms": round(floor, 3),
        "rtt_p50_over_floor_ms": round(p50("dq_rtt") - floor, 3),
        "rtt_within_floor": 0 < p50("dq_rtt") <= floor,
        "ratio_single_vs_http_floor": _ratio(rate_of("dq_single"), rate_of("fl_single")),
        "ratio_http_floor_single_vs_peer": _ratio(rate_of("fl_single"), rate_of("js_single")),
        # What the HTTP client alone would burn to send single enqueues at the peer's
        # rate: at 2+ cores on a 2-core box, 1x the peer is out of reach for any HTTP
        # server measured with this client here.
        "client_cores_for_peer_single_rate": round(
            rate_of("js_single") * client_cpu_per_msg("fl_single") / 1e6, 2
        ),
    }
