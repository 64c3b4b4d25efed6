"""Spark registers the data source ``pumpd`` by itself from this top-level module (its name is
``pyspark_`` + the format's name, and it exports ``DefaultSource``). Shipped by the pumpd package;
importing it imports pyspark."""

from pumpd.spark.source import PumpdDataSource as DefaultSource  # type: ignore[import-not-found]

__all__ = ["DefaultSource"]
