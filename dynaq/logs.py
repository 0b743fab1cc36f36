"""Structured logging: one JSON object per line (or plain text for people).

Fields passed with ``extra={...}`` become members of the JSON object, so logs
can be filtered by ``queue``, ``node`` and so on without parsing messages. The
text format keeps them too, as ``key=value`` pairs after the message (logfmt):
a "request failed" line without its path, code and error tells an operator
nothing.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats records as single-line JSON objects."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self._node = node

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "node": self._node,
        }
        data.update(record_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(c in text for c in ' "=\n\t'):
        return text
    return json.dumps(text)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed with ``extra={...}``."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD and not key.startswith("_")
    }


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``: one line for people, with every
    field the JSON format carries (values with spaces or quotes are JSON-quoted)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = record_fields(record)
        if not fields:
            return line
        return line + " " + " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())


class ClientFaultFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (bad framing, a body its
    ``Content-Encoding`` cannot decode, a line over its limit) at error level with a
    traceback, though it answers the client 400: the client's fault, not the
    node's. Such a record becomes one line at info, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Imported here: the CLI loads this module for commands that never load
        # aiohttp (and the filter runs only on aiohttp's own records).
        from aiohttp.http_exceptions import HttpProcessingError
        from aiohttp.web_protocol import RequestPayloadError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, RequestPayloadError):
            # A body the handler could not read (answered 400 there), met again
            # when aiohttp drains what is left of it.
            why = " ".join(str(exc).split())
        elif isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 400) < 500:
            why = " ".join(str(exc.message).split())
        else:
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = "a client sent a malformed request: %s", (why,)
        record.exc_info, record.exc_text = None, None
        return logging.getLogger().isEnabledFor(logging.INFO)


class _WorkerField(logging.Filter):
    """Adds ``worker`` to every record: the workers of one node share its name and,
    usually, one log stream, so each line says which process wrote it."""

    def __init__(self, worker: str) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self._worker
        return True


def name_worker(worker: str) -> None:
    """From now on every line this process logs carries ``worker`` (a node's worker)."""
    for handler in logging.getLogger().handlers:
        handler.filters[:] = [f for f in handler.filters if not isinstance(f, _WorkerField)]
        handler.addFilter(_WorkerField(worker))


def setup_logging(level: str, fmt: str, node: str) -> None:
    """Configure the root logger once, for the process."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(node))
        logging.Formatter.converter = time.gmtime
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, ClientFaultFilter) for f in server_log.filters):
        server_log.addFilter(ClientFaultFilter())
    # aiohttp's access log costs a formatted line per request; keep it at debug only.
    logging.getLogger("aiohttp.access").setLevel(
        logging.DEBUG if level.lower() == "debug" else logging.WARNING
    )
