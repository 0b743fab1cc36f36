"""Spark 4 finds Python data sources in top-level ``pyspark_*`` modules that expose
``DefaultSource``: with dynaq installed, ``spark.read.format("dynaq")`` works with no
``spark.dataSource.register(...)`` call (which remains the fallback)."""

from dynaq.spark.source import DynaqDataSource as DefaultSource

__all__ = ["DefaultSource"]
