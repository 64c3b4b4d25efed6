"""Reading a queue: one consumer beside the driver, a micro-batch acked once Spark is past it.
"""
