"""The daemon: the coordinator, its worker processes, shared slots, the HTTP API and state file.

May import every layer below it (config, dataplane, engine). See docs/architecture.md.
"""
