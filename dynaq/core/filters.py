"""Subscription filter policies: SNS's grammar, on message attributes
(:func:`compile_policy`) or on JSON message bodies (:func:`compile_body_matcher`).

A policy is a JSON object ``{key: [rule, ...]}`` (the rules:
:mod:`dynaq.core.filter_rules`). A message matches when every key matches at
least one of its rules (AND across keys, OR within one). As in SNS:

* ``"$or": [{...}, {...}, ...]`` -- at least two objects, none naming a rule --
  matches when any of them does (each is a policy of its own, ANDed with the
  keys beside the ``$or``); ``$or`` may stand at the top, inside an alternative
  or (on bodies) inside a key. Anything else keyed ``"$or"`` is a key of that
  name, as SNS reads it;
* on bodies only, a key's object nests: ``{"order": {"total": [rule]}}`` reads
  ``order.total`` (at most ``max_depth`` keys deep);
* at most :data:`MAX_KEYS` keys, counting top-level keys only (nested ones do
  not count) and, for a ``$or``, the keys of its largest alternative;
* at most :data:`MAX_COMBINATIONS` combinations, as SNS counts them: the
  product over keys of their rule counts (a nested key's count times its
  depth), a ``$or`` adding its alternatives' combinations.

Attribute values are strings (a ``String`` or ``Number`` attribute, or any set
through dynaq's own API); a value that does not read as a number never matches
a numeric rule, nor a string a ``true``/``false``/``null`` rule. An attribute
whose data type (kept in :data:`~dynaq.core.messages.TYPES_ATTRIBUTE`) is
``String.Array`` holds a JSON array, and is matched element by element, as SNS
matches it: a rule matches when ANY element does (an element keeps its JSON
type: strings match string rules, numbers numeric ones, ``true``/``false``/
``null`` themselves, ``exists`` and ``anything-but``), and ``anything-but``
matches when any element is not excluded (``["rugby", "baseball"]`` matches
``{"anything-but": ["rugby"]}``, as SNS's documentation shows). An empty array
is what ``{"exists": false}`` matches. ``Binary`` attributes are ignored, as SNS
ignores them (read as absent). Body values keep their JSON types; where a key
holds an array, or an array lies on the path, its elements are the values.

A bad policy is an :class:`~dynaq.errors.InvalidInput` naming the key and the
rule (``filter_policy.a.b: ...``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dynaq.core.filter_rules import (
    RULE_KINDS,
    Loose,
    Values,
    ValuesRule,
    enforcing_limits,
    numeric_bounds,
    stored_policies,
    validate_rule,
    values_rule,
)
from dynaq.core.messages import TYPES_ATTRIBUTE
from dynaq.errors import InvalidInput

__all__ = [
    "MAX_COMBINATIONS",
    "MAX_KEYS",
    "Loose",
    "Matcher",
    "Predicate",
    "Values",
    "ValuesRule",
    "attribute_values",
    "compile_body_matcher",
    "compile_matcher",
    "compile_policy",
    "numeric_bounds",
    "stored_policies",
    "validate_rule",
    "values_at",
    "values_rule",
]

MAX_KEYS = 5
MAX_COMBINATIONS = 150
MAX_OR_DEPTH = 5
"""Deepest nesting of ``$or`` in ``$or`` (SNS states none; this bounds the recursion)."""

Predicate = Callable[[Mapping[str, str] | None], bool]
Path = tuple[str, ...]
Lookup = Callable[[Path], Values]
"""A message's values at a key path (a one-key path for an attribute)."""
Matcher = Callable[[Lookup], bool]


@dataclass(frozen=True)
class _Compiled:
    match: Matcher
    keys: int  # top-level keys, a $or counting its largest alternative's
    combinations: int


def _where(path: Path) -> str:
    return ".".join(("filter_policy", *path))


def _is_or(name: str, value: object) -> bool:
    """SNS's test for an OR: else ``"$or"`` is a key like any other."""
    return (
        name == "$or"
        and isinstance(value, list)
        and len(value) >= 2
        and all(isinstance(alt, Mapping) and not RULE_KINDS & set(alt) for alt in value)
    )


def _all(parts: list[Matcher]) -> Matcher:
    return lambda look: all(m(look) for m in parts)


def _any(parts: list[Matcher]) -> Matcher:
    return lambda look: any(m(look) for m in parts)


def _leaf(key: Path, rules: list[ValuesRule]) -> Matcher:
    def match(look: Lookup) -> bool:
        values = look(key)
        return any(r(values) for r in rules)

    return match


def _compile(obj: Mapping[Any, Any], path: Path, max_depth: int, ors: int) -> _Compiled:
    """``obj`` (the policy, a ``$or`` alternative or a nested key's object) at ``path``."""
    if not obj:
        raise InvalidInput(f"{_where(path)} must be a non-empty object of keys")
    parts: list[Matcher] = []
    keys, combinations = 0, 1
    for name, value in obj.items():
        if not isinstance(name, str):
            raise InvalidInput(f"{_where(path)}: keys must be strings")
        key = (*path, name)
        if _is_or(name, value):
            if ors >= MAX_OR_DEPTH:
                raise InvalidInput(f'{_where(key)}: "$or" nests at most {MAX_OR_DEPTH} deep')
            alts = [_compile(alt, path, max_depth, ors + 1) for alt in value]
            parts.append(_any([a.match for a in alts]))
            keys += max(a.keys for a in alts)
            combinations *= sum(a.combinations for a in alts)
        elif isinstance(value, Mapping):
            if max_depth <= 1:
                raise InvalidInput(
                    f"{_where(key)} must be a non-empty array of rules"
                    " (attribute policies do not nest; a body policy may)"
                )
            if len(key) >= max_depth:
                raise InvalidInput(f"{_where(key)}: keys nest at most {max_depth} deep")
            inner = _compile(value, key, max_depth, ors)
            parts.append(inner.match)
            keys += 1  # SNS counts top-level keys only, not the ones nested in them
            combinations *= inner.combinations
        elif isinstance(value, list) and value:
            parts.append(_leaf(key, [values_rule(r, _where(key)) for r in value]))
            keys += 1
            # SNS weighs a nested key's rules by its depth (its documented 3 x 4 x 2 x 3)
            combinations *= len(value) * len(key)
        else:
            kind = "array of rules or an object" if max_depth > 1 else "array of rules"
            raise InvalidInput(f"{_where(key)} must be a non-empty {kind}")
    return _Compiled(_all(parts), keys, combinations)


def compile_matcher(policy: Any, *, max_depth: int = 1) -> Matcher:
    """Check ``policy`` (keys nested at most ``max_depth`` deep: 1 for attributes)
    and return its matcher over a message's :data:`Lookup`."""
    if not isinstance(policy, Mapping) or not policy:
        raise InvalidInput("filter_policy must be a non-empty object of keys and their rules")
    compiled = _compile(policy, (), max_depth, 0)
    if not enforcing_limits():
        return compiled.match
    if compiled.keys > MAX_KEYS:
        raise InvalidInput(
            f"filter_policy has {compiled.keys} keys (counting a $or's largest alternative);"
            f" SNS allows at most {MAX_KEYS}"
        )
    if compiled.combinations > MAX_COMBINATIONS:
        raise InvalidInput(
            f"filter_policy makes {compiled.combinations} combinations of rules (the product"
            f" of each key's rule count, a $or adding its alternatives'); SNS allows at most"
            f" {MAX_COMBINATIONS}"
        )
    return compiled.match


def _types(attrs: Mapping[str, str]) -> Mapping[str, object]:
    raw = attrs.get(TYPES_ATTRIBUTE)
    if raw is None:
        return {}
    try:
        types = json.loads(raw)
    except ValueError:
        return {}
    return types if isinstance(types, dict) else {}


def attribute_values(value: str | None, data_type: object) -> Values:
    """An attribute's values as its rules see them: a ``String.Array``'s elements
    (arrays and objects in it are no values), nothing for a ``Binary`` one, else the
    value itself (see the module docstring)."""
    if value is None:
        return None
    if isinstance(data_type, str):
        if data_type.startswith("Binary"):
            return None
        if data_type == "String.Array":
            try:
                items = json.loads(value)
            except (ValueError, RecursionError):
                items = None
            if isinstance(items, list):
                return [v for v in items if not isinstance(v, list | dict)] or None
    return [Loose(value)]


def compile_policy(policy: Any) -> Predicate:
    """Check an attribute ``policy`` and return the predicate it means over a
    message's attributes (see the module docstring)."""
    match = compile_matcher(policy)

    def matches(attributes: Mapping[str, str] | None) -> bool:
        attrs = attributes or {}
        types = _types(attrs)
        return match(lambda key: attribute_values(attrs.get(key[0]), types.get(key[0])))

    return matches


def values_at(doc: object, path: Path) -> Values:
    """The leaf values at ``path`` in a JSON ``doc``, arrays on the way (or at the
    end) fanned out; ``None`` when there is none (objects are not values)."""
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


def compile_body_matcher(policy: Any, max_depth: int) -> Callable[[object], bool]:
    """Check a body ``policy`` (keys nested at most ``max_depth`` deep) and return
    its predicate over a parsed JSON body (anything but an object matches nothing)."""
    match = compile_matcher(policy, max_depth=max_depth)
    return lambda doc: isinstance(doc, dict) and match(lambda key: values_at(doc, key))
