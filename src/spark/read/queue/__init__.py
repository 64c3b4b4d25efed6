"""Reading a queue: one consumer beside the driver, acked on commit.
"""
