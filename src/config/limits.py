"""The upper bounds of every count, duration, length and nesting depth in a configuration.

One table, so that the validator, the importers, the daemon and the documentation agree. Each bound is
far beyond what a real deployment uses and well within what the machine survives: a value past
it is refused with a :class:`~pumpd.config.values.ConfigError` that names the bound, before
anything is written or started (the daemon's state file included).
"""

from __future__ import annotations

# -- counts -------------------------------------------------------------------------------------
MAX_WORKERS = 256  # worker positions of one shovel ("workers", --workers): a process each
MAX_SHOVELS = 10_000  # shovels in one file, and in one daemon (file + run time)
MAX_POSITIONS = 10_000  # worker positions of one file, and of one daemon (sum of "workers")
MAX_SHOVELS_PER_PROCESS = 1000  # one event loop; each shovel holds two connections
MAX_PREFETCH = 65535  # basic.qos prefetch-count is a short
MAX_BROKERS = 64  # URIs in one "brokers" list
MAX_DECLARATIONS = 256  # declarations of one endpoint (or of the Spark "declarations" option)
MAX_DELETE_AFTER = 2**63 - 1  # delete_after's message count: a signed 64-bit counter

# -- durations ----------------------------------------------------------------------------------
MAX_RECONNECT_DELAY = 86_400  # seconds (one day)
MAX_STALL_TIMEOUT = 86_400  # stall_timeout, seconds (one day)
MAX_DURATION = 315_360_000  # delete_after_duration, seconds (ten years: rabbit_misc:check_expiry)
MAX_READ_HOLD_MS = 1000  # source_read_hold_ms
MAX_CONNECTION_TIMEOUT_MS = 3_600_000  # a URI's connection_timeout (one hour)
MAX_GROUP_SECONDS = 3600.0  # a group's lease_retry, poll_interval, settle and grace (one hour)

# -- lengths ------------------------------------------------------------------------------------
MAX_SHORTSTR = 255  # bytes of UTF-8: AMQP names (queue, exchange, routing key, tags, ...)
MAX_SHOVEL_NAME = 512  # bytes of UTF-8 (room for a 255-byte queue name and a suffix)
MAX_CLUSTER_NAME = 64  # characters: the group's name is part of every lease queue's name
MAX_URI = 8192  # characters of one AMQP URI (TLS file paths included)
MAX_TABLE_STRING = 65_536  # bytes of UTF-8 of one string inside a field table
MAX_TABLE_VALUES = 1024  # values in one field table, nested tables and arrays counted
MAX_ADDRESS = 4096  # bytes of UTF-8: an AMQP 1.0 source or target address
# bytes of UTF-8: an AMQP 1.0 URI's hostname ("vhost:" and a vhost name of up to 255 bytes fit)
# or container_id
MAX_OPEN_NAME = 1024
# AMQP 1.0's uint: the widest idle_time_out, max_frame_size and group_sequence
MAX_UINT = 2**32 - 1

# -- nesting ------------------------------------------------------------------------------------
MAX_TABLE_DEPTH = 32  # tables and arrays nested inside one field table (AMQP rarely goes past 3)
# A whole configuration document: the deepest clause (a declaration's arguments) sits 8 levels
# down, and its table may nest MAX_TABLE_DEPTH more.
MAX_DOCUMENT_DEPTH = 8 + MAX_TABLE_DEPTH

# -- inputs -------------------------------------------------------------------------------------
MAX_IMPORT_BYTES = 16 * 1024 * 1024  # a file read by import-erlang / import-definitions
MAX_INTEGER_DIGITS = 128  # digits of one integer literal in an Erlang term (any base)
MAX_BINARY_BYTES = 1024 * 1024  # one <<...>> binary of an Erlang term
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024  # a configuration file, or the daemon's state file
