"""The storage contract (:mod:`dynaq.storage.base`) and its backends.

Backends are imported lazily by :func:`open_store`-style factories in
:mod:`dynaq.node`, so optional drivers are only needed when used.
"""

from dynaq.storage.base import Delete, Item, Op, Put, Store

__all__ = ["Delete", "Item", "Op", "Put", "Store"]
