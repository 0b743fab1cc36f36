"""dynaq: a distributed message-queue cluster with Dynamiq's v1 REST API.

The public names: :class:`Client` (the synchronous HTTP client, from
:mod:`dynaq.client`) and :class:`DynaqError` (the root of every server-side
error, from :mod:`dynaq.errors`). ``Client`` is loaded on first use, so that
``import dynaq.config`` (or any other submodule) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynaq.errors import DynaqError

__version__ = "0.1.0"

__all__ = ["Client", "DynaqError", "__version__"]

if TYPE_CHECKING:
    from dynaq.client import Client
else:
    # Hidden from type checkers, so a misspelt attribute is still an error there.

    def __getattr__(name: str) -> object:
        # PEP 562: the client (and msgpack with it) is imported only when asked for.
        if name == "Client":
            from dynaq.client import Client

            return Client
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
