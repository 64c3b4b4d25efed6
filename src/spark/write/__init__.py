"""Writing from Spark: the data source's write options and the per-partition publisher.
"""
