"""Runnable examples of dynaq (imported by the tests that run them)."""
