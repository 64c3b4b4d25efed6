"""An Erlang term reader and the Shovel plugin's static shovels in rabbitmq.config /
advanced.config.
"""
