"""From measured CPU per message to what a ring would do with a core per node.

Measured (by :mod:`bench._cluster_cpu`, per phase of every ring): the µs of
CPU each process spent per message, over the steady part of the phase (the
first :data:`STEADY` of its messages) and over the whole phase. The end of a
drain is not steady: one node's slice empties before the others' and its
receivers poll it empty, which a ring under continuous load does not do.
Projected here, from the steady figures alone:

* ``node_bound_msgs_per_s``: the rate if every node had a core to itself and
  nothing else were the limit, ``1e6 / max(µs per message of one node)``. A
  node is one asyncio process (one core at most); the busiest node sets the
  pace because HAProxy spreads requests evenly.
* ``cassandra_msgs_per_s_per_core``: where Cassandra's own CPU per message
  caps the ring, per core Cassandra is given (it is multithreaded).
* ``haproxy_msgs_per_s_per_core``: the same for the balancer.
* across rings, ``ring_overhead_us_per_msg``: node CPU per message of the
  largest ring minus that of the smallest (the "lanes written" hints of
  batches written into another node's slice, deletes through a node that did
  not serve the message and the hints they send to its owner), and
  ``projected_scaling``: the ratio of the two node-bound rates.
"""

from __future__ import annotations

from typing import Any

from bench._cluster_cpu import Window

PHASES = ("enqueue", "receive_delete")
STEADY = 0.9
"""The steady window of a phase: until this share of its messages is done."""


def _cap(us: float) -> int:
    return round(1e6 / us) if us > 0 else 0


def summarize(phase: str, steady: Window, whole: Window, node_names: list[str]) -> dict[str, Any]:
    """The figures of one phase of one ring, keyed ``<phase>_...``: the measured µs of
    CPU per message and cores used per process over the steady window (plus
    ``nodes``, their sum over the ring's nodes), the µs per message over the whole
    phase (with the drain's tail), and what the steady figures project."""
    us, cores, _ = steady
    per_node = [us.get(n, 0.0) for n in node_names]
    us = {**us, "nodes": round(sum(per_node), 2)}
    cores = {**cores, "nodes": round(sum(cores.get(n, 0.0) for n in node_names), 3)}
    whole_us = {**whole[0], "nodes": round(sum(whole[0].get(n, 0.0) for n in node_names), 2)}
    out: dict[str, Any] = {f"{phase}_cpu_us_per_msg": us, f"{phase}_cores": cores}
    out[f"{phase}_cpu_us_per_msg_whole"] = whole_us
    out[f"{phase}_node_bound_msgs_per_s"] = _cap(max(per_node, default=0.0))
    for proc in ("cassandra", "haproxy"):
        if proc in us:
            out[f"{phase}_{proc}_msgs_per_s_per_core"] = _cap(us[proc])
    return out


def project(by_nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Top-level figures comparing the largest ring with the smallest (both measured
    in this run): per phase, the node CPU per message of each, the ring overhead,
    the node-bound rates and their ratio, and Cassandra's cap."""
    sizes = sorted(by_nodes, key=int)
    small, large = by_nodes[sizes[0]], by_nodes[sizes[-1]]
    out: dict[str, Any] = {}
    for phase in PHASES:
        a, b = small.get(f"{phase}_cpu_us_per_msg"), large.get(f"{phase}_cpu_us_per_msg")
        if a is None or b is None:
            continue
        bound = f"{phase}_node_bound_msgs_per_s"
        cap = f"{phase}_cassandra_msgs_per_s_per_core"
        fig: dict[str, Any] = {
            "measured_node_us_per_msg": {sizes[0]: a["nodes"], sizes[-1]: b["nodes"]},
            "measured_cassandra_us_per_msg": {
                sizes[0]: a.get("cassandra"),
                sizes[-1]: b.get("cassandra"),
            },
            "ring_overhead_us_per_msg": round(b["nodes"] - a["nodes"], 2),
            "projected_node_bound_msgs_per_s": {sizes[0]: small[bound], sizes[-1]: large[bound]},
            "projected_scaling": round(large[bound] / small[bound], 2) if small[bound] else 0.0,
        }
        if cap in large:
            fig["cassandra_msgs_per_s_per_core"] = {sizes[0]: small.get(cap), sizes[-1]: large[cap]}
        out[phase] = fig
    return out
