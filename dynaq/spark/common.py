"""What the dynaq Spark data source's modules share: the queue rows' schema and the
reading of options (Spark's options are case-insensitive)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

SCHEMA = (
    "id bigint, partition int, node string, body binary, "
    "enqueued_at timestamp, attributes map<string,string>"
)
MAX_ID = 2**63 - 1

ATTRIBUTES_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("partition", pa.int32()),
        ("node", pa.string()),
        ("body", pa.binary()),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("attributes", pa.map_(pa.string(), pa.string())),
    ]
)


def normalized_options(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: keep them as a plain dict with lower-case keys."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def required_option(options: dict[str, str], name: str, default: str | None = None) -> str:
    value = options.get(name.lower(), default)
    if value is None or value == "":
        raise ValueError(f'the dynaq data source needs .option("{name}", ...)')
    return value


def flag_option(options: dict[str, str], name: str) -> bool:
    """A boolean option: ``true`` or ``false`` (any case), ``false`` when absent."""
    value = options.get(name.lower(), "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f'.option("{name}", ...) must be true or false, not {value!r}')
    return value == "true"
