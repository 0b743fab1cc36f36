"""How admin commands print: human tables by default, JSON with ``--json``, and exit codes.

Exit codes scripts can rely on (also in the README):

==  =====================================================================
0   done
1   the node refused the request (any other dynaq error)
2   bad usage: arguments, a definitions file, a body file
3   not found (queue, topic, batch)
4   already exists
5   unauthorized or forbidden (token missing, unknown, or lacking the grant)
6   no endpoint could be reached, or the node is unavailable (5xx): retry later
==  =====================================================================
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from dynaq.errors import (
    AlreadyExists,
    ClientError,
    DynaqError,
    Forbidden,
    NotFound,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)

OK, REFUSED, USAGE, NOT_FOUND, EXISTS, DENIED, UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6


def exit_code(exc: DynaqError) -> int:
    """The exit code for an error (see the module docstring)."""
    if isinstance(exc, NotFound):
        return NOT_FOUND
    if isinstance(exc, AlreadyExists):
        return EXISTS
    if isinstance(exc, Unauthorized | Forbidden):
        return DENIED
    if isinstance(exc, Unreachable) or (not isinstance(exc, ClientError) and exc.status >= 500):
        return UNAVAILABLE
    if isinstance(exc, UnexpectedResponse) and exc.status >= 500:
        return UNAVAILABLE
    return REFUSED


def text_body(body: bytes, limit: int | None = None) -> str:
    """A body for a terminal: UTF-8 as is, anything else as ``base64:...``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = "base64:" + base64.b64encode(body).decode("ascii")
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def json_body(body: bytes) -> dict[str, str]:
    """A body as the API writes it in JSON: a string, or base64 with ``encoding``."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "encoding": "base64"}


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], out: TextIO = sys.stdout) -> None:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in rows)
        and bool(rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    print(line(list(headers)), file=out)
    for row in cells:
        print(line(row), file=out)


def pairs(items: Mapping[str, Any], out: TextIO = sys.stdout) -> None:
    """``key  value`` lines, keys padded."""
    width = max((len(k) for k in items), default=0)
    for k, v in items.items():
        print(f"{k.ljust(width)}  {_cell(v)}", file=out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, dict | list):  # a redrive policy, tags: as the API writes them
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def emit_json(data: Any, out: TextIO = sys.stdout) -> None:
    json.dump(data, out, indent=2, sort_keys=False)
    out.write("\n")
