"""Reading into Spark: options, schema, and the stream and queue readers.
"""
