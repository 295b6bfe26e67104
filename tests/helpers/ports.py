"""Free TCP ports on this machine, for workers of a cluster on 127.0.0.1."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Ports the kernel handed out just now (held together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
