"""The processor-status methods of both clients (``GET /v2/processors`` and the
reports ``dynaq worker`` sends): one mixin per flavour over the same operations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from dynaq.client import ops_processors
from dynaq.client.ops import Op

T = TypeVar("T")


class AsyncProcessors:
    """Mixed into :class:`~dynaq.client.AsyncClient`."""

    async def _run(self, op: Op[T]) -> T:
        raise NotImplementedError  # the client's

    async def list_processors(self) -> list[dict[str, Any]]:
        """Every processor's last report: ``name``, ``kind``, ``strategy``, ``state``,
        ``inputs`` (``name``, ``kind``, ``position``, ``lag``), ``attempts``,
        ``delivered``, ``handled_errors``, ``lag``, ``age_s``, ``alive`` and more."""
        return await self._run(ops_processors.list_processors())

    async def describe_processor(self, name: str) -> dict[str, Any]:
        """One processor's last report (``<graph>.<processor>``)."""
        return await self._run(ops_processors.describe(name))

    async def report_processor(self, name: str, report: Mapping[str, Any]) -> dict[str, Any]:
        """Store a worker's report of processor ``name`` (``dynaq worker`` does this)."""
        return await self._run(ops_processors.report(name, report))

    async def forget_processor(self, name: str) -> None:
        """Drop a processor's report (its graph is gone for good)."""
        await self._run(ops_processors.forget(name))


class SyncProcessors:
    """Mixed into :class:`~dynaq.client.Client`."""

    def _run(self, op: Op[T]) -> T:
        raise NotImplementedError  # the client's

    def list_processors(self) -> list[dict[str, Any]]:
        """See :meth:`AsyncProcessors.list_processors`."""
        return self._run(ops_processors.list_processors())

    def describe_processor(self, name: str) -> dict[str, Any]:
        return self._run(ops_processors.describe(name))

    def report_processor(self, name: str, report: Mapping[str, Any]) -> dict[str, Any]:
        return self._run(ops_processors.report(name, report))

    def forget_processor(self, name: str) -> None:
        self._run(ops_processors.forget(name))
