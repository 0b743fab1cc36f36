"""AWS Signature Version 4, verified: who an SQS request comes from.

Every AWS SDK signs its requests with an access key id and a secret; the node
holds the same pairs (``[aws] keys``) and recomputes the signature over the
canonical request, as AWS does, in constant time. A request more than
:data:`MAX_SKEW_S` away from the node's clock is refused (replays age out).
Each key may be bound to one of the node's bearer tokens, whose grants then
decide what the key may do; an unbound key may do everything.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

from aiohttp import web

from dynaq.api.aws.sqs_wire import SqsError
from dynaq.clock import Clock
from dynaq.core.access import Token
from dynaq.errors import InvalidInput

MAX_SKEW_S = 15 * 60
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
    r"SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$"
)


@dataclass(frozen=True)
class AccessKey:
    """A configured key: its secret and the token whose grants it has (None: all)."""

    key_id: str
    secret: str
    token: Token | None


def parse_keys(entries: list[str], tokens: dict[str, Token]) -> dict[str, AccessKey]:
    """``"KEY_ID:SECRET"`` or ``"KEY_ID:SECRET:token-name"`` entries (config)."""
    out: dict[str, AccessKey] = {}
    for entry in entries:
        parts = entry.split(":")
        if len(parts) not in (2, 3) or not all(parts):
            raise InvalidInput("aws.keys entries are KEY_ID:SECRET or KEY_ID:SECRET:token-name")
        token = None
        if len(parts) == 3:
            token = tokens.get(parts[2])
            if token is None:
                raise InvalidInput(f"aws.keys: no auth token named {parts[2]!r}")
        if parts[0] in out:
            raise InvalidInput(f"aws.keys: key id {parts[0]!r} given twice")
        out[parts[0]] = AccessKey(parts[0], parts[1], token)
    return out


def _denied(code: str, message: str) -> SqsError:
    return SqsError(code, message, status=403)


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def verify(
    request: web.Request, body: bytes, keys: dict[str, AccessKey], clock: Clock
) -> AccessKey:
    """The key that signed ``request``, or an :class:`SqsError` as AWS answers."""
    header = request.headers.get("Authorization", "")
    m = _AUTH.match(header)
    if m is None:
        raise _denied(
            "MissingAuthenticationToken", "Request is missing a valid Authentication Token."
        )
    key_id, day, region, service, signed, signature = m.groups()
    key = keys.get(key_id)
    if key is None:
        raise _denied(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    amz_date = request.headers.get("X-Amz-Date", "")
    try:
        when = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        raise _denied("IncompleteSignature", "X-Amz-Date is missing or malformed.") from None
    if amz_date[:8] != day:
        raise _denied("SignatureDoesNotMatch", "The credential date does not match X-Amz-Date.")
    if abs(when.timestamp() - clock.wall_ms() / 1000) > MAX_SKEW_S:
        raise _denied("RequestExpired", f"Request has expired (X-Amz-Date {amz_date}).")
    names = signed.split(";")
    if "host" not in names:
        raise _denied("SignatureDoesNotMatch", "The host header must be signed.")
    canonical_headers = "".join(
        f"{n}:{' '.join(request.headers.get(n, '').split())}\n" for n in names
    )
    query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(request.query.items())
    )
    path = quote(request.path, safe="/~")  # as botocore canonicalizes it
    canonical = "\n".join(
        [request.method, path, query, canonical_headers, signed, hashlib.sha256(body).hexdigest()]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    k = _hmac(("AWS4" + key.secret).encode(), day)
    for part in (region, service, "aws4_request"):
        k = _hmac(k, part)
    expected = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise _denied(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    return key
