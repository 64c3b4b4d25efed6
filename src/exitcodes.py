"""pumpd's exit statuses, as named declarations (documented in docs/operations.md)."""

OK = 0  # ran and stopped cleanly (SIGTERM/SIGINT drained, or every shovel terminated by design)
FAILURE = 1  # a shovel terminated on a failure it was told not to retry (reconnect_delay 0)
CONFIG_ERROR = 2  # bad configuration or command line: nothing was started
UNAVAILABLE = 3  # a service pumpd needs (a broker for the demo, the daemon for status) is not there
CANNOT_LISTEN = 4  # the daemon could not bind its status endpoint (--http): nothing was started
