"""Every wire parser of the HTTP API, in one place (message objects in
:mod:`dynaq.api.message_params`): each input is parsed once, at the edge.

Handlers turn path segments, query strings and decoded bodies into typed
values here; services receive typed values and check only domain limits.
Every malformed input raises :class:`~dynaq.errors.InvalidInput` (422 with the
JSON error body), never anything that becomes a 5xx.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from multidict import MultiMapping

from dynaq.api.message_params import new_message as new_message
from dynaq.api.message_params import new_messages as new_messages
from dynaq.api.message_params import refuse_unknown
from dynaq.core.body_filters import compile_body_policy
from dynaq.core.filters import compile_policy
from dynaq.core.ids import MAX_ID, is_valid_id
from dynaq.core.receipts import decode_receipt
from dynaq.errors import InvalidInput
from dynaq.services.queue_records import RedrivePolicy, Subscription
from dynaq.services.queues.tasks import DEFAULT_RATE_PER_S as DEFAULT_REDRIVE_PER_S

_ID_SEPARATORS = re.compile(r"[\s,+]+")


def is_decimal(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts ``"²"`` and ``"٣"``, which ``int`` refuses
    or reads as other numbers."""
    return text.isascii() and text.isdigit()


def parse_id(text: str) -> int:
    """Parse a message id from a URL or body; :class:`InvalidInput` if malformed."""
    t = text.strip()
    if not is_decimal(t) or len(t) > 19:
        raise InvalidInput(
            f"malformed message id {text!r}: expected a decimal integer in [0, 2^63)"
        )
    value = int(t)
    if value > MAX_ID:
        raise InvalidInput(f"message id {text!r} is out of range [0, 2^63)")
    return value


def id_list(text: str, max_ids: int) -> list[int]:
    """Message ids from a v1 path segment, separated by commas, spaces or ``+``: at
    least one, at most ``max_ids`` (the node's ``http.max_batch``, as v2's lists)."""
    parts = [p for p in _ID_SEPARATORS.split(text) if p]
    if not parts:
        raise InvalidInput("no message ids given")
    if len(parts) > max_ids:
        raise InvalidInput(f"at most {max_ids} message ids at once, got {len(parts)}")
    return [parse_id(p) for p in parts]


def batch_size(text: str, max_batch: int) -> int:
    """A v1 receive's ``batch_size`` path segment: 1..``max_batch`` in ASCII digits."""
    if not is_decimal(text) or len(text) > 9 or not 1 <= int(text) <= max_batch:
        raise InvalidInput(f"batch size must be an integer in 1..{max_batch}, got {text!r}")
    return int(text)


def refuse_repeated_query(query: MultiMapping[str]) -> None:
    """Refuse (422) a query string that gives a parameter twice, even with equal
    values: no copy is silently preferred to another (dynaq's own APIs read each
    parameter once; the AWS protocols number theirs)."""
    if len(query) != len(query.keys()):  # len counts every copy, keys() each name once
        name, n = next((k, len(query.getall(k))) for k in query if len(query.getall(k)) > 1)
        raise InvalidInput(f"query parameter {name} is given {n} times; give it once")


def query_int(query: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """An optional non-negative decimal query parameter within ``[lo, hi]``."""
    text = query.get(name)
    if text is None:
        return default
    if not is_decimal(text) or len(text) > 19 or not lo <= int(text) <= hi:
        raise InvalidInput(f"{name} must be an integer in [{lo}, {hi}]")
    return int(text)


RECEIVE_MEMBERS = ("max_messages", "visibility_timeout_s", "wait_time_s", "max_per_group")
DELETE_MEMBERS = ("ids", "receipts")
VISIBILITY_MEMBERS = ("ids", "receipts", "visibility_timeout_s")


def body_object(body: Any, members: Collection[str] | None = None) -> Mapping[str, Any]:
    """The decoded request body, which must be an object; with ``members``, one whose
    members are all among them (any other is refused, never ignored)."""
    if not isinstance(body, Mapping):
        raise InvalidInput("request body must be an object")
    if members is not None:
        refuse_unknown(body, members)
    return body


def ids_member(body: Mapping[str, Any], max_batch: int) -> list[int]:
    """The ``ids`` member: integers (msgpack) or decimal strings (JSON)."""
    ids = body.get("ids")
    if not isinstance(ids, list) or not ids:
        raise InvalidInput("ids must be a non-empty array")
    if len(ids) > max_batch:
        raise InvalidInput(f"at most {max_batch} ids per request, got {len(ids)}")
    out: list[int] = []
    for value in ids:
        if isinstance(value, bool):
            raise InvalidInput("ids must be integers or decimal strings")
        if isinstance(value, int):
            if not is_valid_id(value):
                raise InvalidInput(f"message id {value} is out of range [0, 2^63)")
            out.append(value)
        elif isinstance(value, str):
            out.append(parse_id(value))
        else:
            raise InvalidInput("ids must be integers or decimal strings")
    return out


def ids_and_receipts(body: Mapping[str, Any], max_batch: int) -> tuple[list[int], dict[int, str]]:
    """The ``ids`` and ``receipts`` members (either or both; at least one item in all):
    bare ids, and receipts as message id → receipt."""
    has_ids, has_receipts = "ids" in body, "receipts" in body
    if not has_receipts and not has_ids:
        raise InvalidInput("ids or receipts must be given")
    ids = ids_member(body, max_batch) if has_ids else []
    receipts: dict[int, str] = {}
    if has_receipts:
        raw = body["receipts"]
        if not isinstance(raw, list) or not raw:
            raise InvalidInput("receipts must be a non-empty array of strings")
        if len(raw) + len(ids) > max_batch:
            raise InvalidInput(f"at most {max_batch} ids and receipts per request")
        for r in raw:
            mid, _ = decode_receipt(r)
            receipts[mid] = r
    return ids, receipts


def optional_seconds(body: Mapping[str, Any], name: str) -> float | None:
    """An optional duration member in seconds."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number")
    try:
        seconds = float(value)
    except OverflowError:  # an integer with hundreds of digits
        raise InvalidInput(f"{name} is out of range") from None
    if not math.isfinite(seconds):
        raise InvalidInput(f"{name} must be a finite number")
    return seconds


def required_seconds(body: Mapping[str, Any], name: str) -> float:
    """A duration member in seconds that must be present."""
    value = optional_seconds(body, name)
    if value is None:
        raise InvalidInput(f"{name} is required")
    return value


def max_messages(body: Mapping[str, Any], name: str = "max_messages") -> int:
    """The ``max_messages`` member of a receive (default 1), or another count."""
    n = body.get(name, 1)
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidInput(f"{name} must be an integer")
    return n


# queue settings (PATCH /v1/queues/{queue}) ------------------------------------

_MAX_SETTING = 2**53

# PATCH keys (Dynamiq's wire names) → setting name and accepted JSON type.
_PATCHABLE: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "visibility_timeout": ("visibility_timeout_s", (int, float)),
    "min_partitions": ("min_partitions", int),
    "max_partitions": ("max_partitions", int),
    "max_partition_age": ("max_partition_age_s", (int, float)),
    "compressed_messages": ("compressed_messages", bool),
    "redrive_policy": ("redrive_policy", (Mapping, type(None))),
    "delay_s": ("delay_s", (int, float)),
    "retention_s": ("retention_s", (int, float)),
    "receive_wait_s": ("receive_wait_s", (int, float)),
    "max_message_bytes": ("max_message_bytes", int),
    "fifo": ("fifo", bool),
    "content_based_dedup": ("content_based_dedup", bool),
    "tags": ("tags", Mapping),
}


def settings_patch(patch: Any) -> dict[str, Any]:
    """A queue settings PATCH body as ``{setting name: typed value}``.

    Types and signs are checked here; ranges and how settings fit together
    are the catalog's (:func:`~dynaq.services.queue_records.check_settings`).
    """
    if not isinstance(patch, Mapping):
        raise InvalidInput("queue settings must be a JSON object")
    changes: dict[str, Any] = {}
    for key, value in patch.items():
        if key not in _PATCHABLE:
            raise InvalidInput(
                f"unknown queue setting {key!r}; allowed: {', '.join(sorted(_PATCHABLE))}"
            )
        field_name, accepted = _PATCHABLE[key]
        if key == "redrive_policy":
            changes[field_name] = redrive_policy(value)
            continue
        if key == "tags":
            if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise InvalidInput("tags must be an object of string values")
            changes[field_name] = tuple(sorted(value.items()))
            continue
        if isinstance(value, bool) and accepted is not bool:
            raise InvalidInput(f"{key} must be a number, not a boolean")
        if not isinstance(value, accepted):
            expected = (
                "a boolean" if accepted is bool else "an integer" if accepted is int else "a number"
            )
            raise InvalidInput(f"{key} must be {expected}")
        if isinstance(value, bool):
            changes[field_name] = value
            continue
        assert isinstance(value, int | float)
        if not 0 <= value < _MAX_SETTING:  # also refuses NaN and infinities
            raise InvalidInput(f"{key} must be a finite, non-negative number below 2^53")
        changes[field_name] = float(value) if isinstance(accepted, tuple) else value
    return changes


def redrive_policy(value: Any) -> RedrivePolicy | None:
    """``{"dead_letter_queue": name, "max_receive_count": n}``, or null to remove the policy."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInput("redrive_policy must be an object or null")
    extra = set(value) - {"dead_letter_queue", "max_receive_count"}
    if extra:
        raise InvalidInput(f"unknown redrive_policy members: {', '.join(sorted(map(str, extra)))}")
    dlq = value.get("dead_letter_queue")
    if not isinstance(dlq, str):
        raise InvalidInput("redrive_policy.dead_letter_queue must be a queue name")
    n = value.get("max_receive_count")
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidInput("redrive_policy.max_receive_count must be an integer")
    return RedrivePolicy(dlq, n)


def redrive_request(body: Any) -> tuple[str | None, int]:
    """A redrive's body ``{"to_queue": name, "max_per_s": n}`` (both optional; ``{}`` when
    the request has none): (to_queue, rate)."""
    body = body_object(body)
    extra = set(body) - {"to_queue", "max_per_s"}
    if extra:
        raise InvalidInput(f"unknown redrive members: {', '.join(sorted(map(str, extra)))}")
    to_queue = body.get("to_queue")
    if to_queue is not None and not isinstance(to_queue, str):
        raise InvalidInput("to_queue must be a queue name")
    rate = body.get("max_per_s", DEFAULT_REDRIVE_PER_S)
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise InvalidInput("max_per_s must be an integer")
    return to_queue, rate


def subscription_options(body: Any) -> Subscription:
    """A subscribe's optional body ``{"filter_policy"?: {...} | null, "filter_scope"?:
    "attributes" | "body", "raw_delivery"?: bool}``."""
    body = body_object(body)
    extra = set(body) - {"filter_policy", "filter_scope", "raw_delivery"}
    if extra:
        raise InvalidInput(f"unknown subscription members: {', '.join(sorted(map(str, extra)))}")
    scope = body.get("filter_scope", "attributes")
    if scope not in ("attributes", "body"):
        raise InvalidInput('filter_scope must be "attributes" or "body"')
    policy = body.get("filter_policy")
    if policy is not None:  # InvalidInput names what is wrong
        (compile_body_policy if scope == "body" else compile_policy)(policy)
    raw = body.get("raw_delivery", True)
    if not isinstance(raw, bool):
        raise InvalidInput("raw_delivery must be a boolean")
    return Subscription(None if policy is None else dict(policy), raw, scope)
