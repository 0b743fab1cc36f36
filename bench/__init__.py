"""Benchmarks: ``python -m bench <scenario> [options]`` from the repository root.

Each scenario is a module ``bench/<scenario>.py`` with
``main(argv: list[str]) -> dict[str, Any]``; it prints progress to stderr and
returns its named figures, which the dispatcher prints as the final line of
stdout (one JSON object). Every load loop is bounded in count and time.
Shared helpers live in :mod:`bench.common`.
"""
