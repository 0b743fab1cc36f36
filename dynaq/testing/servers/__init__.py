"""Throwaway third-party servers the tests and benchmarks run for real.

One module each, with the same shape: ``available()`` says why the server
cannot run here (or ``None``), ``start_*()`` starts it on free 127.0.0.1 ports
and blocks until it answers, and the returned object's ``stop()`` tears it
down. The async wrappers are :func:`dynaq.testing.run_cassandra`,
:func:`dynaq.testing.run_postgres` and :func:`dynaq.testing.run_statsd`.
"""
