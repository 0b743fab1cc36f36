"""A stream's entry type: its JSON Schema, its signature, its order key, and validation.

The **signature** is the SHA-256 of the schema's canonical JSON (sorted keys, no
spaces), so two declarations that differ only in key order or spacing are the
same type. Polymorphic types are ``oneOf`` variants told apart by a ``type``
field (``{"properties": {"type": {"const": "trade"}}}``); a re-declaration may
add variants (Sherlock's "polymorphic types can be extended") and change
nothing else.

The **order key** is a named integer field of every entry (epoch milliseconds,
say), or the entry's index when none is named. Order keys are non-negative
64-bit integers, so they sort as file-name digits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema_rs
import regex
from jsonschema.exceptions import ValidationError, best_match

from dynaq.errors import InvalidInput, SchemaConflict

MAX_ORDER_KEY = 2**63 - 1
TYPE_FIELD = "type"
"""The field that tells ``oneOf`` variants apart."""


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8: equal values give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def signature_of(schema: dict[str, Any], order_key: str | None) -> str:
    """The hex SHA-256 of the canonical schema and order key: the stream's signature."""
    digest = hashlib.sha256(canonical_json({"schema": schema, "order_key": order_key}))
    return digest.hexdigest()


def _variants(schema: dict[str, Any]) -> list[Any] | None:
    one_of = schema.get("oneOf")
    return one_of if isinstance(one_of, list) else None


def _variant_name(variant: Any) -> str | None:
    """The ``const`` (or single ``enum``) of a variant's ``type`` property."""
    if not isinstance(variant, dict):
        return None
    props = variant.get("properties")
    spec = props.get(TYPE_FIELD) if isinstance(props, dict) else None
    if not isinstance(spec, dict):
        return None
    if isinstance(spec.get("const"), str):
        return str(spec["const"])
    enum = spec.get("enum")
    if isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str):
        return str(enum[0])
    return None


def _remote_ref(schema: Any, depth: int = 0) -> str | None:
    """The first ``$ref`` that is not local (``#...``): none may be, a node fetches nothing."""
    if depth > 64:
        return None
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef") and not (
                isinstance(value, str) and value.startswith("#")
            ):
                return str(value)
            found = _remote_ref(value, depth + 1)
            if found is not None:
                return found
    elif isinstance(schema, list):
        for value in schema:
            found = _remote_ref(value, depth + 1)
            if found is not None:
                return found
    return None


def _requires(schema: Any, field: str) -> bool:
    if not isinstance(schema, dict):
        return False
    required = schema.get("required")
    if isinstance(required, list) and field in required:
        return True
    variants = _variants(schema)
    return bool(variants) and all(_requires(v, field) for v in variants or [])


_ORDER_TYPES = ("integer", "number")
"""Declared types that admit an integer order key."""


def _allows_integer(declared: Any) -> bool:
    """Whether a property's declared ``type`` (absent, a name or a list) admits integers."""
    if isinstance(declared, str):
        return declared in _ORDER_TYPES
    if isinstance(declared, list):
        return any(t in _ORDER_TYPES for t in declared)
    return True  # no type: anything, integers included


def _order_type_refused(schema: Any, field: str, where: str = "schema") -> tuple[str, Any] | None:
    """Where ``schema`` (or one of its ``oneOf`` variants) declares ``field`` with a
    ``type`` that admits no integer, and that type (``None``: nowhere)."""
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties")
    spec = props.get(field) if isinstance(props, dict) else None
    if isinstance(spec, dict) and "type" in spec and not _allows_integer(spec["type"]):
        return f"{where}.properties.{field}", spec["type"]
    for i, variant in enumerate(_variants(schema) or []):
        found = _order_type_refused(variant, field, f"{where}.oneOf[{i}]")
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class EntryType:
    """A declared, checked schema with its order key; validates batches of entries."""

    schema: dict[str, Any]
    order_key: str | None
    signature: str

    @classmethod
    def declare(cls, schema: Any, order_key: Any) -> EntryType:
        """Check a declaration: a valid JSON Schema (draft 2020-12), ``oneOf`` variants
        each named by a distinct ``type`` const, and an order key every entry requires.
        Raises :class:`InvalidInput` naming what is wrong."""
        if not isinstance(schema, dict):
            raise InvalidInput("schema must be a JSON object (a JSON Schema)")
        if order_key is not None and (not isinstance(order_key, str) or not order_key):
            raise InvalidInput("order_key must be a non-empty field name, or null for the index")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise InvalidInput(
                f"schema is not a valid JSON Schema at {where}: {exc.message}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a hostile schema may break the checker itself
            raise InvalidInput(f"schema cannot be checked: {type(exc).__name__}") from None
        remote = _remote_ref(schema)
        if remote is not None:
            raise InvalidInput(f"schema $ref {remote[:80]!r} is not local: only '#...' refs")
        try:
            # Entries are validated by this compiled form only (see EntryValidator).
            jsonschema_rs.validator_for(schema)
        except Exception as exc:  # noqa: BLE001 - the compiler's own words say what is wrong
            why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
            raise InvalidInput(f"schema cannot be compiled for validation: {why}") from None
        variants = _variants(schema)
        if variants is not None:
            names = [_variant_name(v) for v in variants]
            for i, name in enumerate(names):
                if name is None:
                    raise InvalidInput(
                        f"schema.oneOf[{i}] must name its variant: "
                        f'properties.{TYPE_FIELD} = {{"const": "<name>"}}'
                    )
            if len(set(names)) != len(names):
                raise InvalidInput(f"schema.oneOf variants must have distinct {TYPE_FIELD} names")
        if order_key is not None and not _requires(schema, order_key):
            raise InvalidInput(
                f"order_key {order_key!r} must be a required field of the schema "
                "(of every oneOf variant)"
            )
        refused = None if order_key is None else _order_type_refused(schema, order_key)
        if refused is not None:
            raise InvalidInput(
                f"order_key {order_key!r} must be an integer field: {refused[0]} is "
                f"declared with type {json.dumps(refused[1])}"
            )
        return cls(schema, order_key, signature_of(schema, order_key))

    def extended_by(self, new: EntryType) -> bool:
        """Whether ``new`` is this type or this type with more ``oneOf`` variants.

        Raises :class:`SchemaConflict` for any other change."""
        if new.signature == self.signature:
            return False
        if new.order_key != self.order_key:
            raise SchemaConflict(
                f"order_key is {self.order_key!r}; a stream's order key cannot change"
            )
        old_v, new_v = _variants(self.schema), _variants(new.schema)
        same_rest = {k: v for k, v in self.schema.items() if k != "oneOf"} == {
            k: v for k, v in new.schema.items() if k != "oneOf"
        }
        if old_v is None or new_v is None or not same_rest or len(new_v) <= len(old_v):
            raise SchemaConflict(
                "the schema differs from the declared one; only new oneOf variants may be added"
            )
        old_set = [canonical_json(v) for v in old_v]
        if [canonical_json(v) for v in new_v[: len(old_v)]] != old_set:
            raise SchemaConflict(
                "the declared oneOf variants must stay as they are, in order; append new ones"
            )
        return True

    def validator(self) -> EntryValidator:
        return EntryValidator(self)


class EntryValidator:
    """Validates entries and extracts their order keys (one per stream, reused).

    Validation and its explanations run on the Rust validator, whose regular
    expressions (``pattern``, ``patternProperties``) cannot backtrack without
    bound: an entry cannot hold the event loop for longer than the regex
    engine's step limit, whatever pattern a schema declares. Python's ``re``
    (which the ``jsonschema`` package matches with) can take exponential time on
    patterns like ``^(a+)+$``, so it never sees an entry. A stream declared
    before :meth:`EntryType.declare` required a schema the Rust validator
    compiles is served by the Python validator with its patterns matched under
    a time bound (:data:`PATTERN_TIMEOUT_S`).
    """

    def __init__(self, entry_type: EntryType) -> None:
        self.type = entry_type
        self._fast: Any = _rust_validator(entry_type.schema)
        self._whole: Any = self._fast or _BoundedValidator(entry_type.schema)
        variants = _variants(entry_type.schema) or []
        # Per variant, for a precise error: oneOf's own error says only "no match".
        self._by_name: dict[Any, Any] = {}
        for v in variants:
            variant = {**{k: x for k, x in entry_type.schema.items() if k != "oneOf"}, **v}
            self._by_name[_variant_name(v)] = (
                _rust_validator(variant) if self._fast is not None else None
            ) or _BoundedValidator(variant)

    def order_of(self, entry: Any, index: int, where: str) -> int:
        """Validate ``entry`` and return its order key (``index`` when none is named)."""
        try:
            ok = self._whole.is_valid(entry)
        except Exception as exc:  # noqa: BLE001 - unresolvable $ref and the like
            raise InvalidInput(f"{where} cannot be validated: {type(exc).__name__}") from None
        if not ok:
            raise InvalidInput(f"{where}{self._explain(entry)}")
        key = self.type.order_key
        if key is None:
            return index
        value = entry.get(key) if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"{where}.{key}: the order key must be an integer")
        if not 0 <= value <= MAX_ORDER_KEY:
            raise InvalidInput(f"{where}.{key}: the order key must be in 0..2^63-1")
        return value

    def _explain(self, entry: Any) -> str:
        validator = self._whole
        if self._by_name and isinstance(entry, dict):
            chosen = self._by_name.get(entry.get(TYPE_FIELD))
            if chosen is None:
                names = ", ".join(sorted(str(n) for n in self._by_name))
                return f".{TYPE_FIELD}: must be one of the variants ({names})"
            validator = chosen
        try:
            if isinstance(validator, _BoundedValidator):
                error = best_match(validator.iter_errors(entry))
                if error is None:
                    return ": does not match the schema"
                path, message = list(error.absolute_path), error.message
            else:
                first = next(iter(validator.iter_errors(entry)), None)
                if first is None:
                    return ": does not match the schema"
                path, message = list(first.instance_path), first.message
        except Exception as exc:  # noqa: BLE001 - unresolvable $ref and the like
            return f": cannot be validated: {type(exc).__name__}"
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        if len(message) > MAX_MESSAGE_CHARS:  # it quotes the value, which may be long
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        return f"{where}: {message}"


MAX_MESSAGE_CHARS = 300
"""Longest explanation of an invalid entry."""
PATTERN_TIMEOUT_S = 0.01
"""Longest one ``pattern`` match may take in the Python validator (see :class:`EntryValidator`)."""


def _rust_validator(schema: dict[str, Any]) -> Any:
    """The Rust validator of ``schema``, or ``None`` when it cannot compile it."""
    try:
        return jsonschema_rs.validator_for(schema)
    except Exception:  # noqa: BLE001 - any refusal: the caller decides what it means
        return None


def _bounded_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """``pattern`` matched by :mod:`regex` under :data:`PATTERN_TIMEOUT_S`."""
    if not validator.is_type(instance, "string"):
        return
    try:
        found = regex.search(pattern, instance, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        yield ValidationError(f"{instance!r} could not be matched against {pattern!r} in time")
        return
    except regex.error:
        yield ValidationError(f"{pattern!r} is not a pattern this node can match")
        return
    if not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_BoundedValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"pattern": _bounded_pattern}
)
