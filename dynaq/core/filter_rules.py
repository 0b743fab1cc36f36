"""The rules of SNS filter policies, one rule over one key's values
(:mod:`dynaq.core.filters` composes them into policies).

A rule matches when any of the key's values matches it (``anything-but``: when
any value is not excluded); a value keeps its type: a :class:`Loose` string (a
scalar attribute, which numeric rules also read as a number) or a JSON value (a
body's, or a ``String.Array`` element). Rules, as in SNS:

* ``"text"`` -- a string equal to ``text``; ``5`` -- a number equal to 5;
  ``true``/``false``/``null`` -- that JSON literal (a scalar attribute is a
  string, so it never matches one);
* ``{"prefix": "ab"}`` / ``{"suffix": "ab"}`` -- a string starting / ending
  with ``ab``; ``{"equals-ignore-case": "Ab"}`` -- a string equal to ``Ab``
  whatever the case;
* ``{"numeric": [">", 0, "<=", 100]}`` (or ``["=", 5]``) -- a number within
  every bound. As SNS checks them: ``=`` stands alone; a range is a lower bound
  (``>``/``>=``) then an upper one (``<``/``<=``), the lower below the upper;
* ``{"cidr": "10.0.0.0/24"}`` -- a string that is an IPv4 or IPv6 address in
  that block;
* ``{"exists": true}`` / ``{"exists": false}`` -- the key is present / absent;
* ``{"anything-but": ...}`` -- present and not any of the values (a string, a
  number, a list of them, ``{"prefix": "ab"}`` or ``{"suffix": "ab"}``).

Numbers in a policy lie within ±1,000,000,000 with at most 5 digits after the
decimal point, as SNS bounds them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from decimal import Decimal

from dynaq.errors import InvalidInput

MAX_NUMBER = 1_000_000_000
MAX_DECIMALS = 5
RULE_KINDS = frozenset(
    {"prefix", "suffix", "equals-ignore-case", "numeric", "cidr", "exists", "anything-but"}
)
"""Rule names: an object holding one is a rule, never a ``$or`` alternative."""

Values = list[object] | None
"""One attribute's (or body key's) values; ``None``: it is not there."""
ValuesRule = Callable[[Values], bool]
Bounds = list[tuple[Callable[[float, float], bool], float]]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_LOWER = (">", ">=")
_UPPER = ("<", "<=")
_STRING_RULES: dict[str, Callable[[str, str], bool]] = {
    "prefix": str.startswith,
    "suffix": str.endswith,
    # SNS lower-cases both sides (not Unicode case folding: "ß" is not "SS")
    "equals-ignore-case": lambda v, arg: v.lower() == arg.lower(),
}
_EXCLUDING = ("prefix", "suffix")  # what SNS takes in an anything-but object


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
        try:
            x = float(v)
        except OverflowError:  # an integer past any float never equals a policy's number
            return None
    else:
        return None
    return x if math.isfinite(x) else None


def _is_number(v: object) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))


_SNS_LIMITS = ContextVar("sns_limits", default=True)


def enforcing_limits() -> bool:
    """Whether SNS's size limits apply (see :func:`stored_policies`)."""
    return _SNS_LIMITS.get()


@contextlib.contextmanager
def stored_policies() -> Iterator[None]:
    """Compile policies without SNS's limits on keys, combinations and numbers.

    A policy is checked against them when it is set; one stored before they held
    (dynaq took 10 keys and any number) must still route after an upgrade, not
    fail every publish to its topic."""
    token = _SNS_LIMITS.set(False)
    try:
        yield
    finally:
        _SNS_LIMITS.reset(token)


def policy_number(v: object, where: str, what: str) -> float:
    """``v`` as a float, refused (naming ``what``) unless it is a number within SNS's
    range and precision."""
    if not _is_number(v):
        raise InvalidInput(f"{where}: {what} must be numeric")
    assert isinstance(v, int | float)
    if not enforcing_limits():
        return float(v)
    if abs(v) > MAX_NUMBER:
        raise InvalidInput(f"{where}: {what} {v} is outside -{MAX_NUMBER}..{MAX_NUMBER}")
    # repr is the shortest text that reads back as v: the digits the policy wrote
    exponent = Decimal(repr(v)).as_tuple().exponent if isinstance(v, float) else 0
    if isinstance(exponent, int) and -exponent > MAX_DECIMALS:
        raise InvalidInput(
            f"{where}: {what} {v} has more than {MAX_DECIMALS} digits after the decimal point"
        )
    return float(v)


def _equals(v: object, where: str) -> Callable[[object], bool]:
    if isinstance(v, str):
        return lambda a: isinstance(a, str) and a == v
    if v is None or isinstance(v, bool):
        # a JSON literal matches itself only (True is also 1, hence "is")
        return lambda a: a is v
    if _is_number(v):
        target = policy_number(v, where, "a number")
        return lambda a: _as_number(a) == target
    raise InvalidInput(f"{where}: a value must be a string, a number, true, false or null")


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
    bounds: Bounds = [(_OPS[op], policy_number(spec[1], where, f"numeric {op}"))]
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
    top = policy_number(spec[3], where, f"numeric {top_op}")
    if top <= bounds[0][1]:
        raise InvalidInput(f"{where}: Bottom must be less than top")
    if len(spec) > 4:
        raise InvalidInput(f"{where}: Too many terms in numeric range expression")
    bounds.append((_OPS[top_op], top))
    return bounds


def _cidr(arg: object, where: str) -> Callable[[object], bool]:
    if not isinstance(arg, str) or arg.count("/") != 1:
        raise InvalidInput(f'{where}: "cidr" takes an address block such as "10.0.0.0/24"')
    try:  # host bits may be set ("10.0.0.7/24"), as SNS allows
        block = ipaddress.ip_network(arg, strict=False)
    except ValueError as exc:
        raise InvalidInput(f'{where}: "cidr" {arg!r} is no IP address block: {exc}') from None

    def inside(v: object) -> bool:
        if not isinstance(v, str):
            return False
        try:
            return ipaddress.ip_address(v) in block  # False across IPv4 and IPv6
        except ValueError:
            return False

    return inside


def _any(pred: Callable[[object], bool]) -> ValuesRule:
    return lambda values: values is not None and any(pred(v) for v in values)


def _excluded(spec: object, where: str) -> Callable[[object], bool]:
    if isinstance(spec, Mapping):
        if len(spec) != 1 or next(iter(spec)) not in _EXCLUDING:
            raise InvalidInput(
                f'{where}: an "anything-but" object is {{"prefix": text}} or {{"suffix": text}}'
                f" (SNS supports no other), not {dict(spec)!r}"
            )
        ((kind, arg),) = spec.items()
        if not isinstance(arg, str):
            raise InvalidInput(f'{where}: "anything-but" {kind} takes a string')
        test = _STRING_RULES[kind]
        return lambda v: isinstance(v, str) and test(v, arg)
    values = spec if isinstance(spec, list) else [spec]
    if not values:
        raise InvalidInput(f'{where}: "anything-but" needs at least one value')
    for v in values:
        if v is None or isinstance(v, bool | list | Mapping):
            raise InvalidInput(f'{where}: "anything-but" takes strings and numbers, not {v!r}')
    excluded = [_equals(v, where) for v in values]
    return lambda v: any(e(v) for e in excluded)


def values_rule(spec: object, where: str) -> ValuesRule:
    """One rule over a key's values (see the module docstring);
    :class:`~dynaq.errors.InvalidInput` names the rule and what is wrong."""
    if not isinstance(spec, Mapping):
        return _any(_equals(spec, where))
    if len(spec) != 1:
        raise InvalidInput(f"{where}: a rule object has exactly one key, not {len(spec)}")
    ((kind, arg),) = spec.items()
    if kind in _STRING_RULES:
        if not isinstance(arg, str):
            raise InvalidInput(f'{where}: "{kind}" takes a string')
        test = _STRING_RULES[kind]
        return _any(lambda v: isinstance(v, str) and test(v, arg))
    if kind == "numeric":
        bounds = numeric_bounds(arg, where)
        return _any(lambda v: (x := _as_number(v)) is not None and all(f(x, n) for f, n in bounds))
    if kind == "cidr":
        return _any(_cidr(arg, where))
    if kind == "exists":
        if not isinstance(arg, bool):
            raise InvalidInput(f'{where}: "exists" takes true or false')
        return (lambda values: values is not None) if arg else (lambda values: values is None)
    if kind == "anything-but":
        excluded = _excluded(arg, where)
        return _any(lambda v: not excluded(v))
    raise InvalidInput(
        f"{where}: unknown rule {kind!r}; use prefix, suffix, equals-ignore-case, numeric,"
        " cidr, exists or anything-but"
    )


def validate_rule(spec: object, where: str) -> None:
    """Raise :class:`~dynaq.errors.InvalidInput` naming what is wrong with one rule."""
    values_rule(spec, where)
