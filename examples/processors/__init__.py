"""Processing graphs (:mod:`dynaq.processors`) to run with ``dynaq worker``."""
