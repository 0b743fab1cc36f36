"""Subscription filter policies: SNS's grammar on message attributes (on message
bodies: :mod:`dynaq.core.body_filters`).

A policy is a JSON object ``{attribute: [rule, ...]}``. A message matches when
every attribute named matches at least one of its rules (AND across names, OR
within one). Rules, as in SNS:

* ``"text"`` -- the attribute equals ``text``; a number ``5`` -- it reads as
  a number equal to 5;
* ``{"prefix": "ab"}`` -- it starts with ``ab``;
* ``{"numeric": [">", 0, "<=", 100]}`` (or ``["=", 5]``) -- it reads as a
  number within every bound. As SNS checks them: ``=`` stands alone; a range
  is a lower bound (``>``/``>=``) then an upper one (``<``/``<=``), the lower
  below the upper; anything else is refused;
* ``{"exists": true}`` / ``{"exists": false}`` -- it is present / absent;
* ``{"anything-but": ...}`` -- it is present and not any of the values (a
  string, a number, a list of them, or ``{"prefix": "ab"}``).

Attribute values are strings (a ``String`` or ``Number`` attribute, or any set
through dynaq's own API); a value that does not read as a number never matches
a numeric rule. An attribute whose data type (kept in
:data:`~dynaq.core.messages.TYPES_ATTRIBUTE`) is ``String.Array`` holds a JSON
array, and is matched element by element, as SNS matches it: a rule matches
when ANY element does (an element keeps its JSON type: strings match string
and ``prefix`` rules, numbers numeric ones, ``true``/``false``/``null`` only
``exists`` and ``anything-but``), and ``anything-but`` matches when any element
is not excluded (``["rugby", "baseball"]`` matches
``{"anything-but": ["rugby"]}``, as SNS's documentation shows). An empty array
is what ``{"exists": false}`` matches. ``Binary`` attributes are ignored, as SNS
ignores them (read as absent).

:func:`compile_policy` checks a policy once (a :class:`~dynaq.errors.InvalidInput`
names what is wrong) and returns a predicate; :func:`values_rule` compiles one
rule over a list of values (shared with body policies).
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from dynaq.core.messages import TYPES_ATTRIBUTE
from dynaq.errors import InvalidInput

MAX_ATTRIBUTES = 10
MAX_RULES = 150

Predicate = Callable[[Mapping[str, str] | None], bool]
Values = list[object] | None
"""One attribute's (or body key's) values; ``None``: it is not there."""
ValuesRule = Callable[[Values], bool]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_LOWER = (">", ">=")
_UPPER = ("<", "<=")


class Loose(str):
    """A scalar attribute value: a string that numeric rules also read as a number
    (array elements and body values keep their JSON types instead)."""

    __slots__ = ()


def _as_number(v: object) -> float | None:
    if isinstance(v, Loose):
        try:
            x = float(v)
        except ValueError:
            return None
    elif isinstance(v, int | float) and not isinstance(v, bool):
        x = float(v)
    else:
        return None
    return x if math.isfinite(x) else None


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _equals(v: object, where: str) -> Callable[[object], bool]:
    if isinstance(v, str):
        return lambda a: isinstance(a, str) and a == v
    if _is_number(v):
        target = float(v)  # type: ignore[arg-type]
        return lambda a: _as_number(a) == target
    raise InvalidInput(f"{where}: a value must be a string or a finite number")


Bounds = list[tuple[Callable[[float, float], bool], float]]


def numeric_bounds(spec: object, where: str = "filter_policy") -> Bounds:
    """A ``numeric`` rule's bounds, checked as SNS checks them: ``[op, n]``, or a
    range ``[">"|">=", low, "<"|"<=", high]`` with ``low < high``."""
    if not isinstance(spec, list) or not spec:
        raise InvalidInput(f"{where}: Invalid member in numeric match: ]")
    op = spec[0]
    if not isinstance(op, str):
        raise InvalidInput(f"{where}: Invalid member in numeric match: {op}")
    if op not in _OPS:
        raise InvalidInput(f"{where}: Unrecognized numeric range operator: {op}")
    if len(spec) < 2 or not _is_number(spec[1]):
        raise InvalidInput(f"{where}: Value of {'equals' if op == '=' else op} must be numeric")
    bounds: Bounds = [(_OPS[op], float(spec[1]))]
    if len(spec) == 2:
        return bounds
    if op not in _LOWER:
        raise InvalidInput(f"{where}: Too many elements in numeric expression")
    top_op = spec[2]
    if not isinstance(top_op, str):
        raise InvalidInput(f"{where}: Bad value in numeric range: {top_op}")
    if top_op not in _UPPER:
        raise InvalidInput(f"{where}: Bad numeric range operator: {top_op}")
    if len(spec) < 4 or not _is_number(spec[3]):
        raise InvalidInput(f"{where}: Value of {top_op} must be numeric")
    if float(spec[3]) <= bounds[0][1]:
        raise InvalidInput(f"{where}: Bottom must be less than top")
    if len(spec) > 4:
        raise InvalidInput(f"{where}: Too many terms in numeric range expression")
    bounds.append((_OPS[top_op], float(spec[3])))
    return bounds


def _any(pred: Callable[[object], bool]) -> ValuesRule:
    return lambda values: values is not None and any(pred(v) for v in values)


def _excluded(spec: object, where: str) -> Callable[[object], bool]:
    if isinstance(spec, Mapping):
        if set(spec) != {"prefix"} or not isinstance(spec["prefix"], str):
            raise InvalidInput(f'{where}: "anything-but" takes values or {{"prefix": text}}')
        prefix = spec["prefix"]
        return lambda v: isinstance(v, str) and v.startswith(prefix)
    values = spec if isinstance(spec, list) else [spec]
    if not values:
        raise InvalidInput(f'{where}: "anything-but" needs at least one value')
    excluded = [_equals(v, where) for v in values]
    return lambda v: any(e(v) for e in excluded)


def values_rule(spec: object, where: str) -> ValuesRule:
    """One rule over a key's values (any value matching matches; ``anything-but``:
    any value not excluded); :class:`~dynaq.errors.InvalidInput` names what is wrong."""
    if not isinstance(spec, Mapping):
        return _any(_equals(spec, where))
    if len(spec) != 1:
        raise InvalidInput(f"{where}: a rule object has exactly one key")
    ((kind, arg),) = spec.items()
    if kind == "prefix":
        if not isinstance(arg, str):
            raise InvalidInput(f'{where}: "prefix" takes a string')
        return _any(lambda v: isinstance(v, str) and v.startswith(arg))
    if kind == "numeric":
        bounds = numeric_bounds(arg, where)
        return _any(lambda v: (x := _as_number(v)) is not None and all(f(x, n) for f, n in bounds))
    if kind == "exists":
        if not isinstance(arg, bool):
            raise InvalidInput(f'{where}: "exists" takes true or false')
        return (lambda values: values is not None) if arg else (lambda values: values is None)
    if kind == "anything-but":
        excluded = _excluded(arg, where)
        return _any(lambda v: not excluded(v))
    raise InvalidInput(
        f"{where}: unknown rule {kind!r}; use prefix, numeric, exists or anything-but"
    )


def validate_rule(spec: object, where: str) -> None:
    """Raise :class:`~dynaq.errors.InvalidInput` naming what is wrong with one rule."""
    values_rule(spec, where)


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
    """Check ``policy`` and return the predicate it means (see the module docstring)."""
    if not isinstance(policy, Mapping) or not policy:
        raise InvalidInput("filter_policy must be a non-empty object of attribute rules")
    if len(policy) > MAX_ATTRIBUTES:
        raise InvalidInput(f"filter_policy names at most {MAX_ATTRIBUTES} attributes")
    compiled: list[tuple[str, list[ValuesRule]]] = []
    total = 0
    for name, rules in policy.items():
        where = f"filter_policy.{name}"
        if not isinstance(name, str) or not isinstance(rules, list) or not rules:
            raise InvalidInput(f"{where} must be a non-empty array of rules")
        total += len(rules)
        if total > MAX_RULES:
            raise InvalidInput(f"filter_policy holds at most {MAX_RULES} rules")
        compiled.append((name, [values_rule(r, where) for r in rules]))

    def matches(attributes: Mapping[str, str] | None) -> bool:
        attrs = attributes or {}
        types = _types(attrs)
        for name, rules in compiled:
            values = attribute_values(attrs.get(name), types.get(name))
            if not any(r(values) for r in rules):
                return False
        return True

    return matches
