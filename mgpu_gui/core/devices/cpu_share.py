"""How much CPU a run's worker gets while other processes keep the machine busy.

A built-in's first step took 2.5 minutes on a busy two-core machine with the worker at
15-19 % of a core, and nothing said why (issue 30, finding 3). The machine's busy time
(/proc/stat, every core) and the worker's (/proc/PID/stat, all its threads) over the same
interval tell it: when the other processes take nearly every core and the worker gets
little of one, the app says so. Linux only (elsewhere nothing is said). Reading the two
files takes under 0.1 ms (86 µs measured on two busy cores): cheap enough for the GUI
thread's 2-second timer, as reading /proc never waits for a disk.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

# Contended: the other processes hold this share of every core, and the run gets less
# than this much of one core (a run's own work needs at least a core: its graph build,
# its input pipeline).
BUSY_SHARE = 0.75
STARVED_CORE = 0.5


@dataclass(frozen=True)
class CpuShare:
    """Over one interval, in cores: what the run used, and what all other processes did."""

    run: float
    others: float
    cores: int

    @property
    def contended(self) -> bool:
        return self.others >= BUSY_SHARE * self.cores and self.run < STARVED_CORE

    def text(self) -> str:
        """What the progress area says while contended."""
        return (f"The CPU is busy with other processes ({self.others:.1f} of {self.cores} "
                f"cores): this run gets {self.run * 100:.0f} % of a core, so it goes slower.")


class CpuShareSampler:
    """`sample()` every few seconds: the CpuShare since the previous call (None at the
    first, or where /proc cannot be read)."""

    def __init__(self, pid: int, proc: Path = Path("/proc")):
        self.proc = proc
        self.pid = pid
        self._ticks_per_s = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, float, float] | None = None  # time, machine busy s, run s

    def sample(self) -> CpuShare | None:
        try:
            busy, cores = self._machine()
            run = self._run()
        except (OSError, IndexError, ValueError):  # the worker ended, or no /proc here
            self._last = None
            return None
        now, last = time.monotonic(), self._last
        self._last = (now, busy, run)
        if last is None or now <= last[0]:
            return None
        seconds = now - last[0]
        run_cores = max(run - last[2], 0.0) / seconds
        machine_cores = max(busy - last[1], 0.0) / seconds
        return CpuShare(run_cores, max(machine_cores - run_cores, 0.0), cores)

    def _machine(self) -> tuple[float, int]:
        """Busy seconds of every core since boot (all but idle and I/O wait), and cores."""
        lines = (self.proc / "stat").read_text().splitlines()
        user, nice, system, _idle, _iowait, irq, softirq = map(int, lines[0].split()[1:8])
        busy = user + nice + system + irq + softirq  # guests are counted in user already
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return busy / self._ticks_per_s, max(cores, 1)

    def _run(self) -> float:
        return process_cpu_ticks(self.proc / str(self.pid)) / self._ticks_per_s


def process_cpu_ticks(proc_dir: Path) -> int:
    """The CPU time (user and system, all threads, in clock ticks) of the process whose
    /proc folder this is; OSError once it has ended."""
    # The command name in parentheses may hold spaces: fields count after it.
    fields = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime
