"""Which GPUs other work is using now, so that the first choice of GPUs leaves them out.

The supervisor will not train on a GPU that runs a compute process outside the app unless
the user confirms it (`runs.claims.busy_outside`): ticking such a GPU by default only makes
the first Train ask, or share it. A process NVML lists is the clearest sign; inside a
container NVML lists no other container's processes, so their work shows only as
utilization or as memory in use, and those count too.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from mgpu_gui.core.devices.telemetry import GpuSnapshot

# A kernel ran half of the last sample period: real work. An idle GPU reads 0 %, one that
# drives a desktop or is sampled by a monitor a few %; beside work at 50 % a run gets half
# the GPU at best.
BUSY_UTILIZATION = 50  # %
# An idle GPU has a percent or two in use (the driver's reserve, a desktop's display); a
# tenth of the memory is someone's working set, which a run beside it may run out of
# memory against.
BUSY_MEMORY_FRACTION = 0.10
GiB = 2**30


@dataclass(frozen=True)
class BusyGpu:
    """A GPU other work is using, and what shows it."""

    index: int
    utilization: int | None  # %; None where NVML cannot say, or this app's run is on it
    others_memory: int | None  # bytes in use by anything but this app's run
    pids: tuple[int, ...]  # processes of others that NVML lists on it


def busy_gpu(snap: GpuSnapshot, own_pids: Collection[int]) -> BusyGpu | None:
    """`snap`'s GPU if other work uses it: a compute process not in `own_pids`, utilization
    of BUSY_UTILIZATION % or more, or BUSY_MEMORY_FRACTION of its memory in use by others.
    None when it is free, or lost (nothing is known about it)."""
    if snap.lost:
        return None
    processes = snap.processes or ()
    pids = tuple(p.pid for p in processes if p.pid not in own_pids)
    own = [p for p in processes if p.pid in own_pids]
    # With this app's run on it, the GPU's utilization is (at least partly) that run's.
    utilization = None if own else snap.utilization_gpu
    others = (None if snap.memory_used is None
              else max(snap.memory_used - sum(p.used_memory or 0 for p in own), 0))
    if (pids or (utilization or 0) >= BUSY_UTILIZATION
            or (others is not None and snap.memory_total
                and others >= BUSY_MEMORY_FRACTION * snap.memory_total)):
        return BusyGpu(snap.index, utilization, others, pids)
    return None


def busy_gpus(snapshots: Iterable[GpuSnapshot], own_pids: Collection[int]) -> list[BusyGpu]:
    """The busy ones of `snapshots` (see `busy_gpu`), in their order."""
    return [busy for snap in snapshots if (busy := busy_gpu(snap, own_pids)) is not None]


def left_out_text(busy: Sequence[BusyGpu]) -> str:
    """Why a first choice left these GPUs out, in one line: 'GPUs 4-7 left out: busy with
    other processes (90-100 % utilization, 40.0-47.0 GiB in use)'."""
    which = (f"GPU {busy[0].index}" if len(busy) == 1
             else f"GPUs {indices_text(b.index for b in busy)}")
    signs = [_span([b.utilization for b in busy], "{} % utilization"),
             _span([None if b.others_memory is None else round(b.others_memory / GiB, 1)
                    for b in busy], "{} GiB in use")]
    why = ", ".join(sign for sign in signs if sign)
    return f"{which} left out: busy with other processes" + (f" ({why})" if why else "")


def _span(values: Sequence[float | None], form: str) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    return form.format(f"{low}" if low == high else f"{low}-{high}")


def _and(items: Iterable[str]) -> str:
    """"0", "0 and 1", "0, 1 and 2"."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def indices_text(indices: Iterable[int]) -> str:
    """GPU indices as people write them: "0 and 2", "4-7", "0, 2 and 4-7" (a run of three
    or more as a range)."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    parts: list[str] = []
    for run in runs:
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(i) for i in run]
    return _and(parts)
