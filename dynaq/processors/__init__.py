"""Processors (Cues): exactly-once processing graphs over dynaq streams.

Declare a :class:`Graph` of processors (:mod:`dynaq.processors.graph`), run it with
:class:`GraphRunner` (or ``dynaq worker module:graph``). Exactly once is
:mod:`dynaq.processors.exactly_once`; at-least-once and at-most-once are
:mod:`dynaq.processors.relaxed`. This package talks to nodes only through
:mod:`dynaq.client`: it runs in a worker process, never inside a node.
"""

from dynaq.processors.graph import (
    Graph,
    Kind,
    Processor,
    QueueRef,
    Strategy,
    StreamRef,
    queue,
    stream,
)
from dynaq.processors.records import META, delivery_hash
from dynaq.processors.runner import STATUS_KEYS, GraphRunner
from dynaq.processors.steps import Handles

__all__ = [
    "META",
    "STATUS_KEYS",
    "Graph",
    "GraphRunner",
    "Handles",
    "Kind",
    "Processor",
    "QueueRef",
    "Strategy",
    "StreamRef",
    "delivery_hash",
    "queue",
    "stream",
]
