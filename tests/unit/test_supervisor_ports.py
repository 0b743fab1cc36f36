"""A restarted worker keeps its ports unless one is taken now (a new address costs
the other workers about half a minute of not seeing it back)."""

from __future__ import annotations

import socket

from dynaq.node.supervisor import _free_now, _loopback_port


def test_a_port_is_free_until_a_program_binds_it_for_tcp_or_udp() -> None:
    port = _loopback_port()
    assert _free_now(port)
    with socket.socket() as t:
        t.bind(("127.0.0.1", port))
        t.listen()
        assert not _free_now(port)
    assert _free_now(port)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", port))
        assert not _free_now(port)


def test_a_port_a_dead_server_left_connections_on_is_free() -> None:
    """Its accepted connections linger in TIME_WAIT; a server binding with
    ``SO_REUSEADDR`` (aiohttp's default) takes the port all the same."""
    port = _loopback_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end waits in TIME_WAIT
    client.close()
    server.close()
    assert _free_now(port)
