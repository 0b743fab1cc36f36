"""Subscription filter policies: SNS's grammar on message attributes (on message
bodies: :mod:`dynaq.core.body_filters`).

A policy is a JSON object ``{attribute: [rule, ...]}``. A message matches when
every attribute named matches at least one of its rules (AND across names, OR
within one). Rules, as in SNS:

* ``"text"`` -- the attribute equals ``text``; a number ``5`` -- it reads as
  a number equal to 5;
* ``{"prefix": "ab"}`` -- it starts with ``ab``;
* ``{"numeric": [">", 0, "<=", 100]}`` (or ``["=", 5]``) -- it reads as a
  number within every bound;
* ``{"exists": true}`` / ``{"exists": false}`` -- it is present / absent;
* ``{"anything-but": ...}`` -- it is present and not any of the values (a
  string, a number, a list of them, or ``{"prefix": "ab"}``).

Attribute values are strings; a value that does not read as a number never
matches a numeric rule. :func:`compile_policy` checks a policy once (a
:class:`~dynaq.errors.InvalidInput` names what is wrong) and returns a
predicate.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from dynaq.errors import InvalidInput

MAX_ATTRIBUTES = 10
MAX_RULES = 150

Predicate = Callable[[Mapping[str, str] | None], bool]
_Rule = Callable[[str | None], bool]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _exact(v: object, where: str) -> _Rule:
    if isinstance(v, str):
        return lambda a: a == v
    if _is_number(v):
        target = float(v)  # type: ignore[arg-type]
        return lambda a: _number(a) == target
    raise InvalidInput(f"{where}: a value must be a string or a finite number")


def numeric_bounds(
    spec: object, where: str = "filter_policy"
) -> list[tuple[Callable[[float, float], bool], float]]:
    """A ``numeric`` rule's bounds: ``[op, n]`` or ``[op, n, op, n]`` as (comparison, n)."""
    if not isinstance(spec, list) or not spec or len(spec) % 2 or len(spec) > 4:
        raise InvalidInput(f'{where}: "numeric" takes [op, number] or [op, number, op, number]')
    bounds: list[tuple[Callable[[float, float], bool], float]] = []
    for op, n in zip(spec[::2], spec[1::2], strict=True):
        if op not in _OPS or not _is_number(n):
            raise InvalidInput(f"{where}: numeric operators are {', '.join(_OPS)} with numbers")
        bounds.append((_OPS[op], float(n)))
    return bounds


def _numeric(spec: object, where: str) -> _Rule:
    bounds = numeric_bounds(spec, where)

    def rule(a: str | None) -> bool:
        x = _number(a)
        return x is not None and all(f(x, n) for f, n in bounds)

    return rule


def _anything_but(spec: object, where: str) -> _Rule:
    if isinstance(spec, Mapping):
        if set(spec) != {"prefix"} or not isinstance(spec["prefix"], str):
            raise InvalidInput(f'{where}: "anything-but" takes values or {{"prefix": text}}')
        prefix = spec["prefix"]
        return lambda a: a is not None and not a.startswith(prefix)
    values = spec if isinstance(spec, list) else [spec]
    if not values:
        raise InvalidInput(f'{where}: "anything-but" needs at least one value')
    excluded = [_exact(v, where) for v in values]
    return lambda a: a is not None and not any(r(a) for r in excluded)


def _rule(spec: object, where: str) -> _Rule:
    if not isinstance(spec, Mapping):
        return _exact(spec, where)
    if len(spec) != 1:
        raise InvalidInput(f"{where}: a rule object has exactly one key")
    ((kind, arg),) = spec.items()
    if kind == "prefix":
        if not isinstance(arg, str):
            raise InvalidInput(f'{where}: "prefix" takes a string')
        return lambda a: a is not None and a.startswith(arg)
    if kind == "numeric":
        return _numeric(arg, where)
    if kind == "exists":
        if not isinstance(arg, bool):
            raise InvalidInput(f'{where}: "exists" takes true or false')
        return (lambda a: a is not None) if arg else (lambda a: a is None)
    if kind == "anything-but":
        return _anything_but(arg, where)
    raise InvalidInput(
        f"{where}: unknown rule {kind!r}; use prefix, numeric, exists or anything-but"
    )


def validate_rule(spec: object, where: str) -> None:
    """Raise :class:`~dynaq.errors.InvalidInput` naming what is wrong with one rule."""
    _rule(spec, where)


def compile_policy(policy: Any) -> Predicate:
    """Check ``policy`` and return the predicate it means (see the module docstring)."""
    if not isinstance(policy, Mapping) or not policy:
        raise InvalidInput("filter_policy must be a non-empty object of attribute rules")
    if len(policy) > MAX_ATTRIBUTES:
        raise InvalidInput(f"filter_policy names at most {MAX_ATTRIBUTES} attributes")
    compiled: list[tuple[str, list[_Rule]]] = []
    total = 0
    for name, rules in policy.items():
        where = f"filter_policy.{name}"
        if not isinstance(name, str) or not isinstance(rules, list) or not rules:
            raise InvalidInput(f"{where} must be a non-empty array of rules")
        total += len(rules)
        if total > MAX_RULES:
            raise InvalidInput(f"filter_policy holds at most {MAX_RULES} rules")
        compiled.append((name, [_rule(r, where) for r in rules]))

    def matches(attributes: Mapping[str, str] | None) -> bool:
        attrs = attributes or {}
        return all(any(r(attrs.get(n)) for r in rules) for n, rules in compiled)

    return matches
