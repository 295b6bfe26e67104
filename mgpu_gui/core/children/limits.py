"""Limits a child entry puts on itself before it reads an untrusted file."""

from __future__ import annotations

import resource


def cap_memory(headroom: int) -> int:
    """Limit this process's address space to its present size plus `headroom` bytes.

    Relative, not absolute: what numpy and h5py reserve at import differs between
    machines (thread buffers per core), and only what a file makes us allocate matters.
    A zip bomb or an absurd array header then ends in a MemoryError and a message,
    not in the machine swapping.
    """
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + headroom if hard == resource.RLIM_INFINITY else min(size + headroom, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit
