"""A stream's exclusive publisher lease, with a fencing token (event loop only).

Sherlock allows one publisher per stream. Here that is a lease: whoever takes
it gets a token larger than every token issued before for that stream (the
last one is stored with the stream, so this holds across restarts). While the
lease is held, appends must carry its token; one without it, with an older
token, or with the token of a lease that expired or was released is refused
(:class:`~dynaq.errors.PublisherFenced`). With no lease held, appends without
a token are accepted (unfenced publishing).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaq.errors import PublisherFenced


@dataclass
class PublisherLease:
    """Who holds the lease (``token``) until when (``expires``, monotonic seconds)."""

    token: int = 0
    expires: float = 0.0

    def held(self, now: float) -> bool:
        return self.token > 0 and self.expires > now

    def check(self, token: int | None, now: float) -> None:
        """Refuse an append that the lease fences out."""
        if token is None:
            if self.held(now):
                raise PublisherFenced(
                    "the stream's publisher lease is held: append with its X-Publisher-Token"
                )
            return
        if not self.held(now) or token != self.token:
            raise PublisherFenced(
                f"publisher token {token} does not hold the stream's lease (expired, released "
                "or taken over): acquire it again"
            )

    def renew(self, token: int | None, ttl_s: float, now: float) -> bool:
        """Renew for its holder (True); False when nobody holds it (take it anew);
        :class:`PublisherFenced` when another token holds it."""
        if not self.held(now):
            return False
        if token != self.token:
            raise PublisherFenced(
                f"the publisher lease is held by another token for {self.expires - now:.1f} s more"
            )
        self.expires = now + ttl_s
        return True

    def grant(self, token: int, ttl_s: float, now: float) -> None:
        self.token, self.expires = token, now + ttl_s

    def release(self, token: int, now: float) -> None:
        """Release it (a no-op when nobody holds it); only its holder may."""
        if self.held(now) and token != self.token:
            raise PublisherFenced(f"token {token} does not hold the publisher lease")
        self.token, self.expires = 0, 0.0
