"""Why is the run as fast as it is: input-, compute- or synchronisation-bound.

The worker measures how much of each step waits for its batch (engine/input_wait.py,
sent as `input_wait` on BatchEnd and EpochEnd); the process supervising it samples the
claimed GPUs' utilization (children/telemetry_recorder.py). Only the supervisor sees
both, so it combines them (`Diagnostician`) and emits `Diagnosed`, which the CLI and
the window show as the same text. `diagnose` is the one place that decides.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.events import BatchEnd, Diagnosed, EpochEnd, Event

INPUT_BOUND_SHARE = 0.25  # this much of each step waiting for data is worth fixing first
LOW_UTILIZATION = 60.0  # % busy: GPUs below it with little input wait wait for each other
LARGE_IMAGE_SIDE = 128  # px: above it, decoding and resizing cost real CPU time
INTERIM_S = 5.0  # within an epoch, a verdict at most this often


class VerdictKind(StrEnum):
    INPUT_BOUND = "input-bound"
    COMPUTE_BOUND = "compute-bound"
    SYNC_BOUND = "synchronisation-bound"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class InputSettings:
    """The run's settings a fix can change."""

    image_folder: bool
    cache: str  # a RunConfig.cache mode
    image_size: tuple[int, int]
    augment: bool
    batch_per_replica: int
    precision: str

    @classmethod
    def of(cls, config: RunConfig) -> InputSettings:
        folder = config.data != DEMO and Path(os.path.expanduser(config.data)).is_dir()
        return cls(folder, config.cache, tuple(config.image_size), bool(config.augment),
                   config.batch_per_replica, config.precision)


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    input_wait: float | None  # share of each step waiting for data, 0-1
    utilization: float | None  # mean % busy of the claimed GPUs; None on CPU replicas
    text: str


def diagnose(input_wait: float | None, utilization: float | None, devices: int,
             settings: InputSettings) -> Verdict:
    """The verdict, with the fixes that fit the run's settings."""
    if input_wait is None:
        return Verdict(VerdictKind.UNKNOWN, None, utilization,
                       "unknown: the input wait is not measured yet")
    waits = f"{input_wait * 100:.0f} % of each step waits for data"
    busy = "" if utilization is None else f", GPUs {utilization:.0f} % busy"
    if input_wait >= INPUT_BOUND_SHARE:
        return Verdict(VerdictKind.INPUT_BOUND, input_wait, utilization,
                       f"input-bound: {waits}; " + " / ".join(_input_fixes(settings)))
    if devices > 1 and utilization is not None and utilization < LOW_UTILIZATION:
        return Verdict(VerdictKind.SYNC_BOUND, input_wait, utilization,
                       f"synchronisation-bound: {waits}{busy}; try a larger batch per GPU "
                       f"(now {settings.batch_per_replica})")
    hint = ("; mixed precision may speed it up" if utilization is not None
            and settings.precision == "float32" else "")
    return Verdict(VerdictKind.COMPUTE_BOUND, input_wait, utilization,
                   f"compute-bound: {waits}{busy}{hint}")


def _input_fixes(s: InputSettings) -> list[str]:
    fixes = []
    if s.image_folder:
        if s.cache == "off":
            fixes.append("turn on caching")
        elif s.cache == "disk":
            fixes.append("cache in memory if it fits")
        if max(s.image_size) > LARGE_IMAGE_SIDE:
            fixes.append(f"lower the image size (now {s.image_size[0]}x{s.image_size[1]})")
        if s.augment:
            fixes.append("lighter augmentation")
        fixes.append("more CPU cores or a faster disk for decoding")
    else:
        fixes.append("free CPU cores for the input pipeline (other processes, fewer CPU "
                     "replicas)")
    return fixes


class Diagnostician:
    """Turns a worker's events and the GPUs' utilization into verdicts: one at each epoch's
    end, and within an epoch at most every INTERIM_S seconds.

    `utilization(since)` is the claimed GPUs' mean % busy since a time (time.time());
    None on CPU replicas or without telemetry.
    """

    def __init__(self, settings: InputSettings, devices: int,
                 utilization: Callable[[float], float | None]):
        self.settings = settings
        self.devices = devices
        self.utilization = utilization
        self._waits: list[float] = []
        self._since: float | None = None

    def seen(self, event: Event) -> Diagnosed | None:
        if isinstance(event, EpochEnd):
            self._waits, self._since = [], event.t
            if event.input_wait is None:  # not measured (a cluster's own loop)
                return None
            return self._verdict(event.input_wait, event.t - event.duration_s, event.epoch)
        if not isinstance(event, BatchEnd) or event.input_wait is None:
            return None
        self._waits.append(event.input_wait)
        if self._since is None:
            self._since = event.t
        if event.t - self._since < INTERIM_S:
            return None
        share = sum(self._waits) / len(self._waits)
        since, self._waits, self._since = self._since, [], event.t
        return self._verdict(share, since, None)

    def _verdict(self, share: float | None, since: float, epoch: int | None) -> Diagnosed:
        verdict = diagnose(share, self.utilization(since), self.devices, self.settings)
        return Diagnosed(kind=verdict.kind.value, input_wait=verdict.input_wait,
                         utilization=verdict.utilization, text=verdict.text, epoch=epoch)
