"""The client's rough edges found by black-box testing, without a node: endpoints without
a port, IPv6 literals, URL parts the client cannot honour (credentials, a path, another
scheme), non-finite numbers, a ``ca_file`` that cannot be read, and long-poll waits
passed to the node as given (the node, not the client, says what it accepts)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import msgpack
import pytest

from dynaq.client import AsyncClient, Client, QueueSettings, TxnEnqueue
from dynaq.client.ops import json_bytes
from dynaq.client.ops_queues import change_visibility, create_queue, receive
from dynaq.client.ops_topics import subscribe
from dynaq.client.policy import NO_RETRIES, host_port, split_endpoint
from dynaq.errors import ClientError, DynaqError

INF, NAN = float("inf"), float("nan")


# endpoints -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "addr", "connect_to"),
    [
        ("http://127.0.0.1", "127.0.0.1", ("127.0.0.1", 80)),
        ("https://queues.example.com", "queues.example.com", ("queues.example.com", 443)),
        ("http://h:8081/", "h:8081", ("h", 8081)),
        ("http://[::1]:19501", "[::1]:19501", ("::1", 19501)),
        ("https://[::1]", "[::1]", ("::1", 443)),
        ("[::1]:8081", "[::1]:8081", ("::1", 8081)),
        ("127.0.0.1:8081", "127.0.0.1:8081", ("127.0.0.1", 8081)),
    ],
)
def test_where_an_endpoint_connects(given: str, addr: str, connect_to: tuple[str, int]) -> None:
    scheme, got = split_endpoint(given)
    assert got == addr
    assert host_port(scheme, got) == connect_to


def test_an_endpoint_without_a_port_connects_to_the_default_one() -> None:
    for endpoint, port in (("http://127.0.0.1", 80), ("https://127.0.0.1", 443)):
        with Client(endpoint) as c:
            conn, _ = c._connection(c.addr, 1.0)  # not connected yet: no I/O
            assert (conn.host, conn.port) == ("127.0.0.1", port)


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("http://user:secret@h:8081", "credentials"),
        ("https://secret@h", "credentials"),
        ("http://user:secret@h:8081/x", "credentials"),
        ("http://h:8081/prefix", "path prefix"),
        ("http://h:8081/a/b/", "path prefix"),
        ("http://h:8081?x=1", "path prefix"),
        ("ftp://h:21", "scheme 'ftp' is not supported"),
        ("ws://h:8081", "scheme 'ws' is not supported"),
        ("http://:8081", "no host"),
        ("http://[::1:8081", "endpoint must be"),
        ("::1", "brackets"),
        ("fe80::1:8081", "brackets"),
    ],
)
def test_what_an_endpoint_cannot_be_is_refused_clearly(given: str, says: str) -> None:
    with pytest.raises(ValueError, match="endpoint") as exc:
        Client(given)
    assert says in str(exc.value)
    assert "secret" not in str(exc.value)  # a password is never echoed
    with pytest.raises(ValueError, match="endpoint"):
        AsyncClient(given)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "serving", "node": "v6", "members": 1}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _V6Server(HTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture
def v6_port() -> Iterator[int]:
    """A tiny server answering ``GET /health`` on ``[::1]``."""
    try:
        server = _V6Server(("::1", 0), _Health)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_an_ipv6_literal_is_reached_by_both_clients(v6_port: int) -> None:
    for endpoint in (f"http://[::1]:{v6_port}", f"[::1]:{v6_port}"):
        with Client(endpoint, retry=NO_RETRIES) as c:
            assert c.health().node == "v6"

    async def aio() -> str:
        async with AsyncClient(f"http://[::1]:{v6_port}", retry=NO_RETRIES) as c:
            return (await c.health()).node

    assert asyncio.run(aio()) == "v6"


# non-finite numbers ----------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        QueueSettings(visibility_timeout_s=INF),
        QueueSettings(delay_s=NAN),
        QueueSettings(retention_s=-INF),
        QueueSettings(receive_wait_s=NAN),
        QueueSettings(max_partition_age_s=INF),
    ],
)
def test_a_non_finite_setting_is_refused_before_sending(settings: QueueSettings) -> None:
    (name,) = settings.as_dict()
    with pytest.raises(ValueError, match=f"{name}: .* is not a finite number"):
        create_queue("q", settings)
    # Nothing is sent: no node listens at port 9, yet the error is the local one.
    with Client("http://127.0.0.1:9", retry=NO_RETRIES) as c:
        with pytest.raises(ValueError, match=name):
            c.create_queue("q", settings)
        with pytest.raises(ValueError, match=name):
            c.configure_queue("q", settings)


def test_definitions_settings_refuse_non_finite_numbers() -> None:
    # json.loads reads Infinity and NaN: a definitions file may hold them.
    data = json.loads('{"visibility_timeout_s": Infinity, "delay_s": 1}')
    with pytest.raises(ValueError, match="visibility_timeout_s: inf is not a finite number"):
        QueueSettings.from_dict(data)
    assert QueueSettings.from_dict({"delay_s": 1, "retention_s": 2.5}).delay_s == 1


def test_no_request_body_carries_non_standard_json() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        json_bytes({"x": NAN})
    with pytest.raises(ValueError, match="non-finite"):
        subscribe("t", "q", {"price": [{"numeric": [">", INF]}]}, "attributes", True)
    assert json_bytes({"x": 1.5}) == b'{"x": 1.5}'


def test_non_finite_durations_of_messages_are_refused() -> None:
    with pytest.raises(ValueError, match="wait_time_s must be a finite number"):
        receive("q", 1, None, NAN, None)
    with pytest.raises(ValueError, match="visibility_timeout_s must be a finite number"):
        receive("q", 1, INF, None, None)
    with pytest.raises(ValueError, match="visibility_timeout_s must be a finite number"):
        change_visibility("q", [1], NAN, None)
    with pytest.raises(ValueError, match="delay_s must be a finite number"):
        TxnEnqueue("q", b"x", delay_s=INF).wire()


# long-poll waits -------------------------------------------------------------


def _sent(wait: float | None) -> tuple[dict[str, Any], float]:
    (call,) = receive("q", 1, None, wait, None).calls
    assert call.body is not None
    return msgpack.unpackb(call.body), call.extra_timeout_s


def test_a_wait_goes_to_the_node_as_given() -> None:
    # Not clamped to 20 s: the node refuses what it does not take (InvalidInput),
    # a wait above its limit as a negative one.
    assert _sent(30) == ({"max_messages": 1, "wait_time_s": 30}, 30)
    assert _sent(-3) == ({"max_messages": 1, "wait_time_s": -3}, 0.0)
    assert _sent(5.5) == ({"max_messages": 1, "wait_time_s": 5.5}, 5.5)
    assert _sent(None) == ({"max_messages": 1}, 0.0)  # the queue's receive_wait_s


# ca_file ---------------------------------------------------------------------


def test_a_ca_file_that_cannot_be_read_is_a_dynaq_error(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-cert.pem"
    garbage.write_text("hello\n")
    for ca_file, says in (
        (str(tmp_path / "missing.pem"), "No such file"),
        (str(garbage), "no certificate"),
        (str(tmp_path), "directory"),
    ):
        for flavour in (Client, AsyncClient):
            with pytest.raises(DynaqError) as exc:
                flavour("https://127.0.0.1:9", ca_file=ca_file)
            assert isinstance(exc.value, ClientError)
            assert ca_file in str(exc.value) and says in str(exc.value)
    with pytest.raises(ValueError, match="https"):
        Client("http://127.0.0.1:9", ca_file=str(garbage))
