"""A group of daemons sharing the positions of one set of shovels: member records on the
coordination broker, the spread of positions over members, handovers.

May import config and engine. See docs/architecture.md.
"""
