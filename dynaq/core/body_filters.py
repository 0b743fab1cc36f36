"""Subscription filter policies on message bodies: SNS's payload-based filtering
(``FilterPolicyScope: MessageBody``), with the rules of :mod:`dynaq.core.filters`.

The policy mirrors the body's JSON: nested objects of keys (at most
:data:`MAX_BODY_DEPTH` deep) whose leaves are arrays of rules; a body matches
when every leaf matches one of its rules (AND across leaves, OR within one).
Unlike scalar attributes (strings), body values keep their JSON types, as SNS
compares them: a string rule or ``prefix`` matches only strings, a number or
``numeric`` only numbers (``5`` equals ``5.0``, never ``"5"``), and booleans and
``null`` only ``exists`` and ``anything-but``. Where a key holds an array, or an
array lies on the path, a rule matches when any element does, and
``anything-but`` when any element is not excluded (as SNS's documentation
shows: ``["rugby", "baseball"]`` matches ``{"anything-but": ["rugby"]}``). A
key that is missing, holds an object, or an empty array is what
``{"exists": false}`` matches. A body that is not a JSON object matches nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from dynaq.core.filters import MAX_ATTRIBUTES, MAX_RULES, Values, values_rule
from dynaq.errors import InvalidInput

MAX_BODY_DEPTH = 5
"""Deepest nesting of a body policy's keys."""

BodyPredicate = Callable[[bytes], bool]


def _leaves(
    policy: Mapping[str, Any], path: tuple[str, ...], out: list[tuple[tuple[str, ...], Any]]
) -> None:
    for name, inner in policy.items():
        where = "filter_policy." + ".".join((*path, str(name)))
        if not isinstance(name, str):
            raise InvalidInput(f"{where}: keys must be strings")
        if isinstance(inner, Mapping):
            if len(path) + 1 >= MAX_BODY_DEPTH:
                raise InvalidInput(f"{where}: keys nest at most {MAX_BODY_DEPTH} deep")
            if not inner:
                raise InvalidInput(f"{where} must be a non-empty object or array of rules")
            _leaves(inner, (*path, name), out)
        elif isinstance(inner, list) and inner:
            out.append(((*path, name), inner))
        else:
            raise InvalidInput(f"{where} must be a non-empty array of rules or an object")


def _values_at(doc: object, path: tuple[str, ...]) -> Values:
    """The leaf values at ``path`` in ``doc``, arrays on the way (or at the end) fanned
    out; ``None`` when there is none (objects are not values)."""
    found: list[object] = [doc]
    for key in path:
        found = [
            item[key]
            for node in found
            for item in (node if isinstance(node, list) else [node])
            if isinstance(item, Mapping) and key in item
        ]
    values = [
        item
        for node in found
        for item in (node if isinstance(node, list) else [node])
        if not isinstance(item, Mapping | list)
    ]
    return values or None


def compile_body_policy(policy: Any) -> BodyPredicate:
    """Check a body policy (see the module docstring) and return its predicate over a
    raw body."""
    if not isinstance(policy, Mapping) or not policy:
        raise InvalidInput("filter_policy must be a non-empty object of body rules")
    leaves: list[tuple[tuple[str, ...], Any]] = []
    _leaves(policy, (), leaves)
    if len(leaves) > MAX_ATTRIBUTES:
        raise InvalidInput(f"filter_policy names at most {MAX_ATTRIBUTES} body keys")
    if sum(len(rules) for _, rules in leaves) > MAX_RULES:
        raise InvalidInput(f"filter_policy holds at most {MAX_RULES} rules")
    compiled = [
        (path, [values_rule(r, "filter_policy." + ".".join(path)) for r in rules])
        for path, rules in leaves
    ]

    def matches(body: bytes) -> bool:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            return False
        if not isinstance(doc, dict):
            return False
        for path, rules in compiled:
            values = _values_at(doc, path)
            if not any(r(values) for r in rules):
                return False
        return True

    return matches
