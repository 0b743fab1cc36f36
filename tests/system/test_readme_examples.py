"""Every fenced code block of ``README.md`` runs as written, or is skipped by a visible rule.

One test per block, named by the line of its opening fence (``README.md:28-sh``),
in README order. Blocks that run share one real ``dynaq server`` process on a
free 127.0.0.1 port and run in README order: the test of a block that uses
that node first runs the blocks above it that use it and have not run yet (so
``-k`` on one block still sees the queues the earlier ones created). The one change made to a block's
text: the README's node address, ``localhost:8081`` or ``127.0.0.1:8081``,
becomes the test node's ``127.0.0.1:<port>``.

* ``sh`` / ``bash`` blocks run with that shell (``sh`` is ``/bin/sh``) under
  ``set -e``, so every command must exit 0. A ``.curlrc`` in ``CURL_HOME``
  makes curl silent (errors still shown) and report each response's status on
  stderr: every response must be 2xx. A comment after a command (``cmd  #
  output``) is the output the command prints: compared without whitespace,
  with ids (runs of 12 or more digits, or digits before ``…``) and ISO
  timestamps as wildcards, and ``…`` standing for anything. A shell block
  without a ``curl`` line fails: it is not an API example, so mark it not run.
* ``python`` blocks run in a subprocess of this interpreter, in a fresh
  directory (relative paths they write land there), with the checkout first
  on ``PYTHONPATH`` and ``PYSPARK_PYTHON`` set to this interpreter, as the
  README's Spark section says Spark workers need; a ``SparkSession`` they build
  has Spark's defaults. They must exit 0. A python block that defines
  ``test_*`` functions is a test module and runs as the README says: with
  pytest and pytest-asyncio in auto mode (and this suite's no-blocking-call
  plugin), and every test it defines must pass. Blocks that import pyspark
  are marked ``slow`` (each starts its own JVM).
* Skipped, with the reason in pytest's report: a block whose fence is preceded
  by ``<!-- not run: <reason> -->``, and blocks tagged as text or data
  (``text``, ``toml``, ``ini``, ``json``, ``yaml``).
* Any other block (no language tag, another language) fails: tag it or mark it.

A failure names the README line: the block's, and for a shell block the
command's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dynaq.testing.process import ROOT, NodeProcess, node_process
from tests.fixtures.spark import spark_unavailable

README = ROOT / "README.md"

RUN = {"sh", "bash", "python"}
NOT_CODE = {"text", "toml", "ini", "json", "yaml"}
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(?P<reason>.+?)\s*-->$")
ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):8081\b")
MARK = "@@readme-line"
CURLRC = f'silent\nshow-error\nwrite-out = "%{{stderr}}{MARK}-http %{{http_code}}\\n"\n'


@dataclass
class Block:
    """One fenced block: the line of its opening fence, its tag, its text."""

    line: int
    lang: str
    text: str
    not_run: str | None

    @property
    def first(self) -> int:
        """The README line of the block's first line of code."""
        return self.line + 1

    @property
    def skip_reason(self) -> str | None:
        if self.not_run is not None:
            return f"README.md:{self.line} marked not run: {self.not_run}"
        if self.lang in NOT_CODE:
            return f"README.md:{self.line} is a `{self.lang}` block, not code"
        return None

    @property
    def problem(self) -> str | None:
        """Why a block that is not skipped cannot run (the test fails with it), if so."""
        if self.skip_reason is not None:
            return None
        if self.lang not in RUN:
            return (
                f"README.md:{self.line}: a `{self.lang or 'untagged'}` block: tag it "
                f"({', '.join(sorted(RUN | NOT_CODE))}) or mark it <!-- not run: reason -->"
            )
        if self.lang != "python" and not any(
            re.search(r"(^|[\s$(])curl\s", c) for _, c in shell_commands(self)
        ):
            return (
                f"README.md:{self.line}: a shell block with no curl command is not an API "
                "example: mark it <!-- not run: reason -->"
            )
        return None

    @property
    def runs(self) -> bool:
        return self.skip_reason is None and self.problem is None

    @property
    def uses_node(self) -> bool:
        """Whether the block talks to the README's node (then it runs after the ones above
        that do: they made the queues it uses)."""
        return ADDRESS.search(self.text) is not None

    @property
    def is_test_module(self) -> bool:
        return (
            self.lang == "python" and re.search(r"^(async )?def test_", self.text, re.M) is not None
        )

    @property
    def uses_spark(self) -> bool:
        return self.lang == "python" and "pyspark" in self.text


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, with the ``<!-- not run: -->`` marker before each."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        assert i < len(lines), f"README.md:{start + 1}: the block is never closed"
        before = next((x.strip() for x in reversed(lines[:start]) if x.strip()), "")
        marker = NOT_RUN.match(before)
        blocks.append(
            Block(
                line=start + 1,
                lang=fence.group(1),
                text="\n".join(lines[start + 1 : i]) + "\n",
                not_run=marker.group("reason") if marker else None,
            )
        )
        i += 1
    return blocks


BLOCKS = readme_blocks(README.read_text())


def _param(block: Block) -> Any:
    marks = [pytest.mark.slow] if block.uses_spark else []
    return pytest.param(block, id=f"README.md:{block.line}-{block.lang or 'untagged'}", marks=marks)


# shell blocks ------------------------------------------------------------------------


def shell_commands(block: Block) -> list[tuple[int, str]]:
    """The block's commands with their README lines (``\\`` continuations joined)."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for n, raw in enumerate(block.text.splitlines(), block.first):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if not pending:
            start = n
        pending.append(raw)
        if not raw.endswith("\\"):
            out.append((start, "\n".join(pending)))
            pending = []
    assert not pending, f"README.md:{start}: a continued line never ends"
    return out


def expected_output(command: str) -> str | None:
    """The output a command's trailing comment shows (``cmd  # output``), if any."""
    last = command.splitlines()[-1]
    match = re.match(r"^.*?\S\s+#\s(?P<out>.*)$", last)
    return match.group("out").strip() if match else None


_ID = re.compile(r"\d+…|\d{12,}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")


def _normal(text: str) -> str:
    return re.sub(r"\s+", "", _ID.sub("<id>", _TIME.sub("<time>", text)))


def output_matches(expected: str, actual: str) -> bool:
    """``actual`` is ``expected`` modulo whitespace, ids, timestamps and ``…``."""
    pattern = ".*".join(re.escape(part) for part in _normal(expected).split("…"))
    return re.fullmatch(pattern, _normal(actual), re.S) is not None


def _split(stream: str) -> dict[int, str]:
    """Per README line, what a marked stream printed after that line's marker."""
    parts = re.split(rf"\n?{MARK} (\d+)\n", stream)
    return {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)}


def run_shell(block: Block, node: NodeProcess, tmp: Path) -> None:
    assert shutil.which("curl") is not None, "curl is not installed"
    commands = shell_commands(block)
    tmp.mkdir(parents=True, exist_ok=True)
    script = ["set -e"]
    for line, command in commands:
        script.append(f"printf '\\n{MARK} {line}\\n'; printf '{MARK} {line}\\n' >&2")
        script.append(ADDRESS.sub(f"127.0.0.1:{node.port}", command))
    (tmp / ".curlrc").write_text(CURLRC)
    env = {**_env(), "CURL_HOME": str(tmp)}
    shell = "/bin/sh" if block.lang == "sh" else "bash"
    run = subprocess.run(
        [shell, "-c", "\n".join(script)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out, err = _split(run.stdout), _split(run.stderr)
    for line, command in commands:
        if line not in err:
            break  # set -e stopped the block before this command
        statuses = [int(s) for s in re.findall(rf"^{MARK}-http (\d+)$", err[line], re.M)]
        shown = re.sub(rf"^{MARK}-http \d+\n?", "", err[line], flags=re.M).strip()
        where = f"README.md:{line}: `{command.strip()}`"
        bad = [s for s in statuses if not 200 <= s < 300]
        assert not bad, f"{where} got HTTP {bad}: {out.get(line, '').strip()} {shown}"
        if line == max(err) and run.returncode != 0:
            pytest.fail(f"{where} exited {run.returncode}: {shown or out.get(line, '')}")
        want = expected_output(command)
        if want is not None:
            got = out.get(line, "")
            assert output_matches(want, got), (
                f"{where} printed {got.strip()!r}, README shows {want!r}"
            )
    assert run.returncode == 0, f"README.md:{block.line} exited {run.returncode}: {run.stderr}"


# python blocks -----------------------------------------------------------------------


def _env() -> dict[str, str]:
    """This environment for a README example: no DYNAQ_* settings, no proxies, the
    checkout first on PYTHONPATH, this interpreter for Spark's workers and its
    scripts (``dynaq``) first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DYNAQ_") and not k.lower().endswith("_proxy")
    }
    paths = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The `dynaq` command of this interpreter's install, as a user's shell has it.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def run_python(block: Block, node: NodeProcess, tmp: Path) -> None:
    if block.uses_spark and (why := spark_unavailable()) is not None:
        if os.environ.get("CI"):
            pytest.fail(f"README.md:{block.line} needs Spark in CI: {why}")
        pytest.skip(f"README.md:{block.line} needs Spark: {why}")
    tmp.mkdir(parents=True, exist_ok=True)
    # Blank lines first, so that a traceback's line numbers are README.md's.
    source = "\n" * block.line + ADDRESS.sub(f"127.0.0.1:{node.port}", block.text)
    if block.is_test_module:
        path = tmp / f"test_readme_{block.line}.py"
        (tmp / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
        argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.fixtures.blocking"]
    else:
        path = tmp / f"readme_{block.line}.py"
        argv = []
    path.write_text(source)
    run = subprocess.run(
        [sys.executable, *argv, path.name],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, (
        f"README.md:{block.line} (python) exited {run.returncode} "
        f"(tracebacks' line numbers are README lines):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    )
    if block.is_test_module:
        defined = len(re.findall(r"^(?:async )?def test_", block.text, re.M))
        assert f"{defined} passed" in run.stdout, run.stdout[-3000:]


# the tests ---------------------------------------------------------------------------


@dataclass
class Readme:
    """Runs the README's blocks in order against one node, each at most once."""

    node: NodeProcess
    tmp: pytest.TempPathFactory
    failures: dict[int, str | None] = field(default_factory=dict)  # line -> why it failed
    skips: dict[int, str] = field(default_factory=dict)  # line -> why it could not run here

    def run_through(self, block: Block) -> None:
        """Run the blocks above ``block`` that use the node and have not run, then ``block``."""
        for earlier in BLOCKS if block.uses_node else []:
            if earlier.line == block.line:
                break
            if not (earlier.runs and earlier.uses_node):
                continue
            self._run(earlier)
            if (failure := self.failures.get(earlier.line)) is not None:
                pytest.fail(
                    f"README.md:{block.line} not run: README.md:{earlier.line} above it "
                    f"failed:\n{failure}",
                    pytrace=False,
                )
        self._run(block)
        if block.line in self.skips:
            pytest.skip(self.skips[block.line])
        if (failure := self.failures[block.line]) is not None:
            pytest.fail(failure, pytrace=False)

    def _run(self, block: Block) -> None:
        if block.line in self.failures or block.line in self.skips:
            return
        tmp = self.tmp.mktemp(f"readme-{block.line}")
        try:
            if block.lang == "python":
                run_python(block, self.node, tmp)
            else:
                run_shell(block, self.node, tmp)
        except (AssertionError, pytest.fail.Exception) as exc:
            self.failures[block.line] = str(exc)
        except subprocess.TimeoutExpired as exc:
            self.failures[block.line] = f"README.md:{block.line} timed out after {exc.timeout} s"
        except pytest.skip.Exception as exc:
            self.skips[block.line] = str(exc.msg)
        else:
            self.failures[block.line] = None


@pytest.fixture(scope="module")
def readme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Readme]:
    node = node_process(tmp_path_factory.mktemp("readme-node"), "dynaq-1").start()
    try:
        yield Readme(node, tmp_path_factory)
    finally:
        node.terminate()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_readme_block(block: Block, request: pytest.FixtureRequest) -> None:
    if (reason := block.skip_reason) is not None:
        pytest.skip(reason)
    if (problem := block.problem) is not None:
        pytest.fail(problem, pytrace=False)
    readme: Readme = request.getfixturevalue("readme")
    readme.run_through(block)


def test_the_readme_has_blocks_that_run() -> None:
    """The parser found the README's examples (an empty parse would pass vacuously)."""
    runnable = [b for b in BLOCKS if b.runs]
    assert {b.lang for b in runnable} >= {"sh", "python"}
    assert any(b.uses_spark for b in runnable) and any(b.is_test_module for b in runnable)


def test_output_is_compared_modulo_whitespace_ids_and_ellipses() -> None:
    assert output_matches(
        '[{"id":"7339…","body":"hello"}]', '[{"id": "3432232553872785408", "body": "hello"}]'
    )
    assert output_matches("7339832140034539520", "3432232553872785408\n")
    assert output_matches('{"status":"serving",…}', '{"status": "serving", "node": "dynaq-1"}')
    assert not output_matches("true", "false")
    assert not output_matches('[{"id":"7339…","body":"hello"}]', "[]")


def test_a_failing_block_fails_with_its_readme_line(readme: Readme, tmp_path: Path) -> None:
    """What a broken example reports: the README line of the command or block."""
    text = 'curl -X PUT localhost:8081/v1/queues/fine   # "created"\ncurl localhost:8081/v1/nope\n'
    with pytest.raises(
        AssertionError, match=r"README\.md:42: `curl localhost:8081/v1/nope` got HTTP \[404\]"
    ):
        run_shell(Block(40, "sh", text, None), readme.node, tmp_path / "a")
    text = "curl -X PUT localhost:8081/v1/queues/other   # true\n"
    with pytest.raises(
        AssertionError, match=r"README\.md:41: .* printed '\"created\"', README shows 'true'"
    ):
        run_shell(Block(40, "sh", text, None), readme.node, tmp_path / "b")
    text = "false\n"
    with pytest.raises(pytest.fail.Exception, match=r"README\.md:41: `false` exited 1"):
        run_shell(Block(40, "sh", text, None), readme.node, tmp_path / "c")
    text = "import sys\n\nsys.exit(3)\n"
    with pytest.raises(AssertionError, match=r"README\.md:40 \(python\) exited 3"):
        run_python(Block(40, "python", text, None), readme.node, tmp_path / "d")
    text = "raise ValueError('boom')\n"
    with pytest.raises(AssertionError, match=r"line 41, in <module>\s+raise ValueError"):
        run_python(Block(40, "python", text, None), readme.node, tmp_path / "e")
