"""The README's "Testing your own code against dynaq" example runs as written."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Testing your own code against dynaq"


def _example() -> str:
    text = README.read_text()
    section = text[text.index(SECTION) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the section has no python example"
    return match.group(1)


async def test_readme_example_runs() -> None:
    namespace: dict[str, Any] = {}
    source = await asyncio.to_thread(_example)
    exec(compile(source, str(README), "exec"), namespace)
    tests: list[Callable[[], Awaitable[None]]] = [
        fn for name, fn in namespace.items() if name.startswith("test_")
    ]
    assert len(tests) == 2
    for test in tests:
        await test()
