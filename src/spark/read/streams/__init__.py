"""Reading streams: offset ranges on the executors, over the streams protocol or AMQP 0-9-1.
"""
