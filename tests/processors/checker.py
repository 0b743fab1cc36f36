"""The exactly-once checkers: read every output and error stream (or side-effect file)
back and assert that each input was delivered exactly once — to an output or an
error, never both, never neither — and that deliveries carry distinct, stable
delivery hashes. Entries without ``_cues`` metadata are foreign (a test's noise
writer) and are not deliveries."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from dynaq.client import Client
from dynaq.processors import META, delivery_hash
from tests.processors.harness import entries


def deliveries(c: Client, stream: str) -> list[dict[str, Any]]:
    return [e for e in entries(c, stream) if META in e]


def _exactly_once(delivered: Counter[int], expected: set[int], what: str) -> None:
    missing = sorted(expected - set(delivered))
    extra = sorted(set(delivered) - expected)
    twice = sorted(n for n, k in delivered.items() if k > 1)
    assert not twice, f"{what}: delivered more than once: {twice}"
    assert not missing, f"{what}: never delivered: {missing}"
    assert not extra, f"{what}: delivered but never sent: {extra}"


def _distinct_hashes(*groups: list[dict[str, Any]]) -> None:
    keys = [(e[META]["hash"], e[META]["slot"]) for g in groups for e in g]
    dup = [k for k, v in Counter(keys).items() if v > 1]
    assert not dup, f"a delivery (hash, slot) landed twice: {dup}"


def check_transform(c: Client, t: str, sent: list[int]) -> dict[str, int]:
    outs, errs = deliveries(c, f"{t}-out"), deliveries(c, f"{t}-err")
    out_n = Counter(int(e["n"]) for e in outs)
    err_n = Counter(int(e["inputs"][f"{t}-in"]["n"]) for e in errs)
    _exactly_once(out_n + err_n, set(sent), "transform")
    assert all(e["double"] == 2 * e["n"] for e in outs)
    assert set(err_n) == {n for n in sent if n % 7 == 0}, "errors are exactly the multiples of 7"
    assert all("multiple of 7" in e["error"] for e in errs)
    _distinct_hashes(outs, errs)
    return {"outputs": len(outs), "errors": len(errs)}


def check_join(c: Client, t: str, sent: list[int]) -> dict[str, int]:
    outs, errs = deliveries(c, f"{t}-out"), deliveries(c, f"{t}-err")
    assert all(e["a"] == e["b"] for e in outs), "a join pairs the i-th entries of its inputs"
    got = Counter(int(e["a"]) for e in outs)
    got += Counter(int(e["inputs"][f"{t}-a"]["n"]) for e in errs)
    _exactly_once(got, set(sent), "join")
    assert {int(e["inputs"][f"{t}-a"]["n"]) for e in errs} == {n for n in sent if n % 5 == 0}
    _distinct_hashes(outs, errs)
    return {"outputs": len(outs), "errors": len(errs)}


def check_fork(c: Client, t: str, sent: list[int]) -> dict[str, int]:
    o1, o2 = deliveries(c, f"{t}-o1"), deliveries(c, f"{t}-o2")
    errs = deliveries(c, f"{t}-err")
    err_n = Counter(int(e["inputs"][f"{t}-in"]["n"]) for e in errs)
    ok = {n for n in sent if n % 5}
    _exactly_once(Counter(int(e["n"]) for e in o1) + err_n, set(sent), "fork, first output")
    _exactly_once(Counter(int(e["n"]) for e in o2), {n for n in ok if n % 2}, "fork, second output")
    assert set(err_n) == set(sent) - ok
    # Both slots of one step carry the same hash: a fork's outputs are one delivery.
    by_hash = {e[META]["hash"]: e["n"] for e in o1}
    assert all(by_hash[e[META]["hash"]] == e["n"] for e in o2)
    _distinct_hashes(o1, o2, errs)
    return {"outputs": len(o1) + len(o2), "errors": len(errs)}


def check_alts(c: Client, t: str, sent_a: list[int], sent_b: list[int]) -> dict[str, int]:
    outs = deliveries(c, f"{t}-out")
    _exactly_once(Counter(int(e["n"]) for e in outs), set(sent_a) | set(sent_b), "alts")
    src = {int(e["n"]): e["src"] for e in outs}
    assert all(src[n] == f"{t}-a" for n in sent_a) and all(src[n] == f"{t}-b" for n in sent_b)
    # An alts retry takes the input its first attempt recorded (snapshot-alts).
    proc = f"{t}-g.either"
    recorded: dict[str, str] = {}
    h = None
    for r in entries(c, f"_cues.{proc}"):
        if r["t"] == "snapshot":
            h = delivery_hash(proc, r["tailers"])
        elif r["t"] == "snapshot-alts" and h is not None:
            recorded.setdefault(h, r["tailer"])
    for e in outs:
        assert recorded[e[META]["hash"]] == e["src"], "delivered from another input than recorded"
    _distinct_hashes(outs)
    return {"outputs": len(outs), "snapshots_with_alts": len(recorded)}


def check_sink(tmp: Path, sent: list[int]) -> dict[str, int]:
    effects = [json.loads(x) for x in (tmp / "effects.jsonl").read_text().splitlines()]
    calls = [json.loads(x) for x in (tmp / "calls.jsonl").read_text().splitlines()]
    _exactly_once(Counter(int(e["n"]) for e in effects), set(sent), "sink effects")
    n_of: dict[str, int] = {}
    for call in calls:
        assert n_of.setdefault(call["hash"], call["n"]) == call["n"], "a hash named two inputs"
    return {"effects": len(effects), "calls": len(calls)}


def check_imperative(c: Client, t: str, sent: list[int]) -> dict[str, int]:
    outs, errs = deliveries(c, f"{t}-out"), deliveries(c, f"{t}-err")
    assert all(e["a"] == e["b"] for e in outs)
    assert all(e["hash"] == e[META]["hash"] for e in outs), "handles.delivery_hash is the step's"
    got = Counter(int(e["a"]) for e in outs)
    got += Counter(
        int(v["n"]) for e in errs for k, v in e["inputs"].items() if k.startswith(f"{t}-a@")
    )
    _exactly_once(got, set(sent), "imperative")
    _distinct_hashes(outs, errs)
    return {"outputs": len(outs), "errors": len(errs)}
