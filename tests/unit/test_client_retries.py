"""The sync client retries only what cannot have been processed twice."""

from __future__ import annotations

import socket
import threading

import pytest

from dynaq.client import Client, RetryPolicy
from dynaq.errors import Unreachable


class _HangsUp:
    """Reads one request per connection, then closes it without answering."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.requests.append(conn.recv(65536).split(b"\r\n", 1)[0])

    def close(self) -> None:
        self.sock.close()


def test_a_post_that_reached_the_server_is_not_retried() -> None:
    server = _HangsUp()
    try:
        with (
            Client(f"http://127.0.0.1:{server.port}", timeout_s=2) as c,
            pytest.raises(Unreachable) as err,
        ):
            c.enqueue("q", [b"x"])
        assert err.value.sent
        assert len(server.requests) == 1  # an enqueue that may be stored is not sent twice
    finally:
        server.close()


def test_an_idempotent_request_is_retried_once() -> None:
    server = _HangsUp()
    try:
        with (
            Client(
                f"http://127.0.0.1:{server.port}",
                timeout_s=2,
                retry=RetryPolicy(attempts=3, base_delay_s=0.01),
            ) as c,
            pytest.raises(Unreachable),
        ):
            c.ring()
        assert len(server.requests) == 3  # every attempt the policy allows
    finally:
        server.close()
