"""Which TCP ports a process listens on (Linux /proc): to check that a private broker opens
only the ports it was given, on loopback only."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path

_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    fd_dir = Path("/proc", str(pid), "fd")
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_addr: str, v6: bool) -> str:
    # /proc prints an address as 32-bit words, each in the host's byte order
    words = [int(hex_addr[i : i + 8], 16) for i in range(0, len(hex_addr), 8)]
    packed = struct.pack(f"={len(words)}I", *words)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, packed)
    address = ipaddress.IPv6Address(packed)
    # a JVM binds 127.0.0.1 as an IPv6 socket on the IPv4-mapped address
    return str(address.ipv4_mapped or address)


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """The ``(address, port)`` pairs that process ``pid`` listens on over TCP (v4 and v6; an
    IPv4-mapped IPv6 address is given as the IPv4 address)."""
    inodes = _socket_inodes(pid)
    found: set[tuple[str, int]] = set()
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = Path("/proc", str(pid), "net", table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != _LISTEN or inode not in inodes:
                continue
            hex_addr, hex_port = local.split(":")
            found.add((_address(hex_addr, v6), int(hex_port, 16)))
    return found
