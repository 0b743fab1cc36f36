"""Membership over SWIM (kinship: Lifeguard SWIM, encrypted gossip, Rust core).

kinship runs the protocol on its own thread, so a busy or briefly blocked
event loop never gets this node declared dead; dynaq only reads its events on
the node's loop and turns each into a :meth:`MembershipView.replace`.

Rules this module applies:

* **Live = alive or suspect.** A suspect member keeps its slice until it is
  declared dead, so a node that only stalls causes no reshuffle (and no burst
  of duplicates). Dead and departed members own nothing.
* **The HTTP address travels as metadata** (``meta["http"]``); a member
  without it is not a dynaq node and is ignored.
* **Gossip is authenticated and encrypted** with a key derived from the
  shared secret ``gossip.key`` (SHA-256, so any passphrase works), and
  isolated by a cluster label: nodes with another secret or label can neither
  join nor inject anything.
* **Leave on stop.** Peers learn of a graceful stop at once (``MemberLeft``)
  and take over this node's slice without waiting for failure detection.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import kinship

from dynaq.cluster import kinship_quirks
from dynaq.cluster.base import Membership
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import InvalidInput
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

HTTP_META = "http"
SCHEME_META = "scheme"
"""Sent only by nodes that serve HTTPS (absent means http, as from older nodes)."""
PRESETS = ("lan", "wan", "local")
_KEY_CONTEXT = b"dynaq gossip key v1\x00"


@dataclass(frozen=True)
class SwimSettings:
    """What the SWIM agent needs, resolved from config by :mod:`dynaq.node`."""

    bind: str
    seeds: Sequence[str] = ()
    secret: str = ""
    label: str = "dynaq"
    preset: str = "lan"
    advertise: str = ""
    leave_timeout_s: float = 2.0


def derive_key(secret: str) -> bytes:
    """The 32-byte gossip key for a shared secret (same secret, same key on every node)."""
    return hashlib.sha256(_KEY_CONTEXT + secret.encode()).digest()


def _is_loopback(addr: str) -> bool:
    host = addr.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def check_preset(preset: str) -> None:
    """:class:`InvalidInput` naming ``gossip.preset`` unless it is one of :data:`PRESETS`
    (checked at start-up even with gossip off: a typo is never silently accepted)."""
    if preset not in PRESETS:
        raise InvalidInput(f"gossip.preset must be one of {', '.join(PRESETS)}, not {preset!r}")


def check_settings(s: SwimSettings) -> None:
    """Every check :func:`kinship_config` makes of the settings themselves, without
    building anything: the node's preflight runs it before anything starts."""
    check_preset(s.preset)
    if not s.secret and not _is_loopback(s.advertise or s.bind):
        raise InvalidInput("gossip.key (a shared secret) is required when gossip leaves loopback")


def kinship_config(
    name: str, http_addr: str, s: SwimSettings, scheme: str = "http"
) -> kinship.Config:
    """Build kinship's config; raises :class:`InvalidInput` naming the bad setting."""
    check_settings(s)
    fields: dict[str, object] = {
        "name": name,
        "bind": s.bind,
        "seeds": [seed for seed in s.seeds if seed and seed != s.bind],
        "cluster": s.label,
        "meta": {HTTP_META: http_addr, **({SCHEME_META: scheme} if scheme != "http" else {})},
        "rejoin_interval": kinship_quirks.REJOIN_INTERVAL_S,
    }
    if s.advertise:
        fields["advertise"] = s.advertise
    if s.secret:
        fields["keys"] = [derive_key(s.secret)]
    else:
        # Loopback only (check_settings refused the rest): nothing outside this
        # machine can reach the port.
        fields["insecure_plaintext"] = True
    factory = {"lan": kinship.Config.lan, "wan": kinship.Config.wan, "local": kinship.Config.local}
    try:
        return factory[s.preset](**fields)
    except (kinship.ConfigError, ValueError, TypeError) as exc:
        raise InvalidInput(f"bad gossip setting: {exc}") from exc


def live_members(members: Sequence[kinship.Member]) -> list[Member]:
    """dynaq members among kinship's alive and suspect members."""
    live = (kinship.State.ALIVE, kinship.State.SUSPECT)
    return [
        # Only "https" changes the scheme: anything else is read as the default.
        Member(m.name, m.meta[HTTP_META], "https" if m.meta.get(SCHEME_META) == "https" else "http")
        for m in members
        if m.state in live and HTTP_META in m.meta
    ]


class SwimMembership(Membership):
    """The ring as kinship sees it, mirrored into a :class:`MembershipView`."""

    def __init__(self, view: MembershipView, settings: SwimSettings) -> None:
        super().__init__(view)
        self.settings = settings
        self._cluster: kinship.Cluster | None = None
        self._task: asyncio.Task[None] | None = None
        self.changes = 0

    @property
    def gossip_addr(self) -> str:
        """The address gossip is bound to (the real port when ``bind`` asked for port 0)."""
        if self._cluster is None:
            return self.settings.bind
        return self._cluster.local.addr

    async def start(self) -> None:
        me = self.view.me
        cfg = kinship_config(me.name, me.http_addr, self.settings, me.scheme)
        kinship.log_to_python()
        cluster = kinship.Cluster(cfg)
        # Joins the seeds; a node that reaches none starts alone and keeps retrying.
        await cluster.start()
        self._cluster = cluster
        stream, snapshot = kinship_quirks.subscribe_then_snapshot(cluster)
        self._apply(snapshot)
        self._task = asyncio.create_task(self._follow(stream), name="gossip-events")
        log.info(
            "joined gossip",
            extra={"gossip": cluster.local.addr, "members": [m.name for m in self.view.members]},
        )

    def _apply(self, members: Sequence[kinship.Member]) -> None:
        if self.view.replace(live_members(members)):
            self.changes += 1
            log.info("ring changed", extra={"members": [m.name for m in self.view.members]})

    async def _follow(self, stream: kinship.EventStream) -> None:
        cluster = self._cluster
        assert cluster is not None
        try:
            async for event in stream:
                if isinstance(event, kinship.UserMessage):
                    continue
                try:
                    if isinstance(event, kinship.NameConflict):
                        log.error(
                            "another node claims this name",
                            extra={"member": event.member.name, "other": event.other_addr},
                        )
                    # Every event (EventsLost included) resyncs from the full live set,
                    # so the view can never drift from kinship's.
                    self._apply(cluster.members())
                except Exception:
                    # One bad event must not freeze the ring view for good.
                    log.exception("gossip event not applied", extra={"event": repr(event)})
        except kinship.KinshipClosed:
            log.exception("gossip stopped on an internal error")

    async def stop(self) -> None:
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        try:
            with contextlib.suppress(kinship.KinshipClosed):
                await cluster.leave(self.settings.leave_timeout_s)
        finally:
            with contextlib.suppress(kinship.KinshipClosed):
                await cluster.close()
            await cancel_and_wait(self._task)
            self._task = None
            await kinship_quirks.settle_after_close()
        log.info("left gossip")
