"""Runnable demonstrations of the data source (``make spark-demo``, ``make spark-pipeline-demo``).
"""
