"""Client endpoints: what a node URL may look like, and the error for what it may not."""

from __future__ import annotations

import pytest

from dynaq.client.policy import Endpoints, split_endpoint


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8081", ("http", "127.0.0.1:8081")),
        ("https://queues.example.com", ("https", "queues.example.com")),
        ("127.0.0.1:8081", ("http", "127.0.0.1:8081")),
        ("[::1]:8081", ("http", "[::1]:8081")),
    ],
)
def test_endpoints_as_urls_or_host_port(given: str, expected: tuple[str, str]) -> None:
    assert split_endpoint(given) == expected


@pytest.mark.parametrize(
    "given",
    ["notaurl", "http://127.0.0.1:notaport", "http://127.0.0.1:99999", "ftp://h:1", "h:", ""],
)
def test_a_malformed_endpoint_is_refused_by_name(given: str) -> None:
    with pytest.raises(ValueError, match="endpoint") as exc:
        split_endpoint(given)
    assert "int()" not in str(exc.value)


def test_endpoints_must_share_a_scheme() -> None:
    assert Endpoints("http://a:1,b:2").addrs == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="all be http"):
        Endpoints("http://a:1,https://b:2")
