"""Chaos soaks (``-m soak``, deselected by default; minutes each): ``bench chaos`` runs.

kill -9 every few seconds under load for two minutes, on one LMDB node and on
a 3-node ring on the session's Cassandra; the history checker's verdict must
be clean. ``python -m bench chaos`` runs the same soak by hand, longer.
"""

from __future__ import annotations

import json

import pytest

from bench import chaos
from dynaq.testing.servers.cassandra import CassandraServer

pytestmark = [pytest.mark.soak, pytest.mark.timeout(900)]


def _assert_clean(result: dict[str, object]) -> None:
    print(f"\nFAULT-RESULT {json.dumps({'fault': 'soak', **result})}")
    assert result["drained"] is True, result  # else "lost" may be a backlog
    assert result["ok"] is True, result
    responses = result["responses"]
    assert isinstance(responses, dict)
    assert not [k for k in responses if k.split(" ")[1] in ("500", "502", "504")], responses
    assert result["lost"] == 0 and result["id_reuse"] == 0, result
    assert result["order_violations"] == 0 and result["dedup_violations"] == 0, result


def test_chaos_soak_on_one_lmdb_node() -> None:
    _assert_clean(chaos.main(["--duration", "120", "--interval", "4", "--seed", "41"]))


def test_chaos_soak_on_a_cassandra_ring(cassandra: CassandraServer) -> None:
    argv = ["--storage", "cassandra", "--cassandra", cassandra.host]
    _assert_clean(chaos.main([*argv, "--duration", "120", "--interval", "8", "--seed", "42"]))
