"""The in-flight handover a node sends before it leaves its ring gracefully.

The next owners keep the leaving node's in-flight messages invisible until their
deadlines, with their receive counts and delivery numbers (receipts the leaving
node handed out keep working; earlier ones stay refused). Sent in chunks
(:func:`~dynaq.core.hints.handover_chunks`), each signed for its peer.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp

from dynaq.cluster.hints import post_signed
from dynaq.core.hints import HandoverEntry, HintsMessage, encode_hints, handover_chunks
from dynaq.core.membership import Member
from dynaq.core.peer_auth import PeerSigner

log = logging.getLogger(__name__)


async def hand_over(
    handover: dict[Member, dict[str, list[HandoverEntry]]],
    signer: PeerSigner,
    ssl_context: ssl.SSLContext | None = None,
    timeout_s: float = 3.0,
    missed: set[str] | None = None,
) -> int:
    """Send a leaving node's in-flight messages to their next owners; return how many
    peers took them, and add the names of those that did not to ``missed``. Best
    effort within ``timeout_s``: the leaving node parks what a peer missed (a peer
    that is leaving too refuses it, 503), else that peer serves those messages
    again at once (duplicates, never loss)."""
    if not handover:
        return 0
    ok = 0
    failed: set[str] = set() if missed is None else missed
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:

        async def send(owner: Member, queues: dict[str, list[HandoverEntry]]) -> None:
            nonlocal ok
            statuses: list[int] = []
            try:
                for chunk in handover_chunks(queues):
                    body = encode_hints(HintsMessage({}, chunk))
                    statuses.append(await post_signed(s, signer, owner, body, ssl_context))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.warning(
                    "in-flight handover failed", extra={"peer": owner.name, "error": str(exc)}
                )
                failed.add(owner.name)
                return
            if all(status == 200 for status in statuses):
                ok += 1
            else:
                failed.add(owner.name)
                log.warning(
                    "in-flight handover refused", extra={"peer": owner.name, "statuses": statuses}
                )

        await asyncio.gather(*(send(o, q) for o, q in handover.items()))
    return ok
