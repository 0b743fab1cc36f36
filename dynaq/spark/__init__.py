"""PySpark data source for dynaq (needs the ``spark`` extra: ``pip install 'dynaq[spark]'``)."""

from dynaq.spark.source import DynaqDataSource

__all__ = ["DynaqDataSource"]
