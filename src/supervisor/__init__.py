"""The daemon's supervision: the coordinator, its worker processes, their shared-memory slots,
the shovels' definitions and state file, pauses, the status report and what systemd is told.

May import config, dataplane, engine, group and the shared top-level modules. See docs/architecture.md.
"""
