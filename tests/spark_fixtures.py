"""One local[2] SparkSession per test session (it takes ~5-7 s and ~1 GiB to start).

Workers run ``PYSPARK_PYTHON``, not the driver's interpreter, and find Python
data sources by scanning their ``sys.path`` for ``pyspark_*`` modules: both
must be set before the JVM starts. An editable install is invisible to that
scan, so the repository root goes on ``PYTHONPATH``. In CI a missing Java or
pyspark fails the tests; elsewhere it skips them with the reason.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dynaq.testing.process import ROOT


def spark_unavailable() -> str | None:
    """``None`` if a SparkSession can start here, else why not."""
    if shutil.which("java") is None:
        return "Java is not installed (scripts/deps/spark.sh)"
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed: {exc}"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    why = spark_unavailable()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark is required in CI: {why}")
        pytest.skip(why)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dynaq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
