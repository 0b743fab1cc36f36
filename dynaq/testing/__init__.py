"""Run real dynaq nodes, clusters and the servers around them in tests and benchmarks.

The blocking harness: :mod:`dynaq.testing.process`, :mod:`dynaq.testing.cluster`,
:mod:`dynaq.testing.servers`.
"""
