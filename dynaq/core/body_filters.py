"""Subscription filter policies on message bodies: SNS's payload-based filtering
(``FilterPolicyScope: MessageBody``), with the grammar and rules of
:mod:`dynaq.core.filters` (nested keys, ``$or``, SNS's limits).

The policy mirrors the body's JSON: nested objects of keys (at most
:data:`MAX_BODY_DEPTH` deep) whose leaves are arrays of rules. Unlike scalar
attributes (strings), body values keep their JSON types, as SNS compares them: a
string rule or ``prefix`` matches only strings, a number or ``numeric`` only
numbers (``5`` equals ``5.0``, never ``"5"``), ``true``/``false``/``null`` only
themselves. Where a key holds an array, or an array lies on the path, a rule
matches when any element does, and ``anything-but`` when any element is not
excluded. A key that is missing, holds an object, or an empty array is what
``{"exists": false}`` matches. A body that is not a JSON object matches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dynaq.core.filters import compile_body_matcher

MAX_BODY_DEPTH = 5
"""Deepest nesting of a body policy's keys."""

BodyPredicate = Callable[[bytes], bool]


def compile_body_policy(policy: Any) -> BodyPredicate:
    """Check a body policy (see the module docstring) and return its predicate over a
    raw body."""
    matches = compile_body_matcher(policy, MAX_BODY_DEPTH)

    def predicate(body: bytes) -> bool:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            return False
        return matches(doc)

    return predicate
