"""A node's process ends without finalizing the interpreter (so kinship's thread
cannot crash a clean stop), yet with its logs and output flushed."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import atexit, logging, sys
from dynaq.cli.node import exit_without_finalizing
from dynaq.logs import setup_logging
setup_logging("info", "text", "dynaq-1")
atexit.register(lambda: print("FINALIZED", file=sys.stderr, flush=True))
logging.getLogger("dynaq.node.root").info("node stopped", extra={"queues": 2})
print("last words", end="")  # no newline: a line-buffered stream would keep it
exit_without_finalizing(3)
"""


def test_the_status_and_every_buffered_line_come_out_and_no_exit_hook_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 3, out.stderr
    assert out.stdout == "last words"
    assert "INFO dynaq.node.root: node stopped queues=2" in out.stderr
    assert "FINALIZED" not in out.stderr
