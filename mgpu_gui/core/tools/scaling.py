"""Scaling test figures: per device count, throughput, speed-up and efficiency.

Pure and light (no TensorFlow, no Qt, no processes): the timing job
(`mgpu_gui.processes.scaling_worker`) measures raw step times for one device count in a
child process each; `scale_runner.py` runs the counts; this module turns the
raw timings into a `ScalingReport`, recommends a device count, and writes the
CSV, the JSON and the terminal table.

Definitions (one device count k, the 1-device run as baseline):
- step time: wall time between consecutive step ends, each end synchronised by
  fetching that step's loss; median and p10-p90 over the timed steps.
- samples/s = global batch / median step time (the median shrugs off the
  occasional stall, see docs/architecture.md; the mean is kept in the JSON).
- speed-up = samples/s(k) / samples/s(1); efficiency = speed-up / k (1.0 is
  linear). Weak scaling keeps the per-device batch (the global batch grows with
  k); strong scaling keeps the global batch (each device gets global / k).
- Without a 1-device figure (it failed or was not asked for), the smallest
  count that ran is the baseline, taken as linear up to there, and the report
  says so.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.plain import to_plain

DEFAULT_THRESHOLD = 0.75
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 5
CSV_COLUMNS = (
    "devices", "global_batch", "batch_per_replica", "samples_per_s", "speedup", "efficiency",
    "step_median_ms", "step_p10_ms", "step_p90_ms", "timed_steps", "status", "note",
    "input_wait",
)


class ScalingMode(StrEnum):
    WEAK = "weak"  # batch per device fixed: the global batch grows with the devices
    STRONG = "strong"  # global batch fixed: each device gets a smaller share


class PointStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"  # the count's worker reported an error or died (out of memory, ...)
    SKIPPED = "skipped"  # not run: e.g. a global batch that does not split evenly
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class CountResult:
    """What one count's timing job reports: raw per-step wall times, or why it failed."""

    devices: int
    global_batch: int
    batch_per_replica: int
    status: PointStatus = PointStatus.OK
    step_times_s: tuple[float, ...] = ()
    warmup_s: float = 0.0  # the warm-up steps, compile/trace included
    device_names: tuple[str, ...] = ()
    message: str = ""
    error_type: str = ""  # the exception's class name, when the job failed
    input_wait: float | None = None  # share of the timed steps spent waiting for data

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CountResult:
        return cls(devices=int(data["devices"]), global_batch=int(data["global_batch"]),
                   batch_per_replica=int(data["batch_per_replica"]),
                   status=PointStatus(data.get("status", "ok")),
                   step_times_s=tuple(float(t) for t in data.get("step_times_s", ())),
                   warmup_s=float(data.get("warmup_s", 0.0)),
                   device_names=tuple(data.get("device_names", ())),
                   message=str(data.get("message", "")),
                   error_type=str(data.get("error_type", "")),
                   input_wait=data.get("input_wait"))


@dataclass(frozen=True)
class ScalePoint:
    """One device count's figures; the numbers are None unless `status` is OK."""

    devices: int
    global_batch: int
    batch_per_replica: int
    status: PointStatus = PointStatus.OK
    samples_per_s: float | None = None
    mean_samples_per_s: float | None = None
    step_median_s: float | None = None
    step_p10_s: float | None = None
    step_p90_s: float | None = None
    timed_steps: int = 0
    speedup: float | None = None
    efficiency: float | None = None
    message: str = ""
    input_wait: float | None = None  # as CountResult's

    @property
    def ok(self) -> bool:
        return self.status is PointStatus.OK


@dataclass(frozen=True)
class Recommendation:
    devices: int
    sentence: str


@dataclass(frozen=True)
class ScalingReport:
    mode: ScalingMode
    device_kind: str  # "gpu" or "cpu"
    points: tuple[ScalePoint, ...]
    threshold: float = DEFAULT_THRESHOLD
    baseline_devices: int | None = None  # the count speed-ups are against (1 when it ran)
    recommendation: Recommendation | None = None
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    model: str = ""
    data: str = ""
    device_names: tuple[str, ...] = ()  # the largest count's devices, one per replica
    notes: tuple[str, ...] = ()

    @property
    def unit(self) -> str:
        """What a device is called here, plural: 'GPUs' or 'CPU replicas'."""
        return device_word(self.device_kind, 2)

    def ok_points(self) -> list[ScalePoint]:
        return [p for p in self.points if p.ok]

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalingReport:
        points = tuple(ScalePoint(**{**p, "status": PointStatus(p["status"])})
                       for p in data["points"])
        rec = data.get("recommendation")
        return cls(mode=ScalingMode(data["mode"]), device_kind=data["device_kind"],
                   points=points, threshold=data.get("threshold", DEFAULT_THRESHOLD),
                   baseline_devices=data.get("baseline_devices"),
                   recommendation=Recommendation(**rec) if rec else None,
                   steps=data.get("steps", DEFAULT_STEPS),
                   warmup=data.get("warmup", DEFAULT_WARMUP),
                   model=data.get("model", ""), data=data.get("data", ""),
                   device_names=tuple(data.get("device_names", ())),
                   notes=tuple(data.get("notes", ())))

    @classmethod
    def from_json(cls, text: str) -> ScalingReport:
        return cls.from_dict(json.loads(text))


def device_word(kind: str, count: int) -> str:
    one = "GPU" if kind == "gpu" else "CPU replica"
    return one if count == 1 else one + "s"


# -- counts and batches -----------------------------------------------------------
def default_counts(max_devices: int) -> list[int]:
    return list(range(1, max_devices + 1))


def parse_counts(text: str, max_devices: int | None = None) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; sorted, without repeats; UserError for anything else."""
    try:
        counts = sorted({int(part) for part in text.replace(" ", "").split(",") if part})
    except ValueError:
        raise UserError(f"--counts {text!r}: give device counts separated by commas, "
                        f"e.g. 1,2,4") from None
    if not counts or counts[0] < 1:
        raise UserError(f"--counts {text!r}: every count must be at least 1.")
    if max_devices is not None and counts[-1] > max_devices:
        raise UserError(f"--counts {text!r}: {counts[-1]} devices asked for, but only "
                        f"{max_devices} are chosen; choose more devices or smaller counts.")
    return counts


def batch_for(mode: ScalingMode, devices: int, batch_per_replica: int,
              global_batch: int) -> tuple[int, int] | str:
    """(global batch, batch per replica) for one count, or why the count cannot run.

    Weak: the per-replica batch is kept. Strong: `global_batch` is kept, which
    must split evenly (an uneven split would time a different global batch).
    """
    if mode is ScalingMode.WEAK:
        return batch_per_replica * devices, batch_per_replica
    if global_batch < devices:
        return f"global batch {global_batch} is smaller than {devices} devices"
    if global_batch % devices:
        return f"global batch {global_batch} does not split evenly over {devices} devices"
    return global_batch, global_batch // devices


def even_batches_note(global_batch: int, counts: Sequence[int]) -> str:
    """For strong scaling: the counts a global batch skips, and batches that split over all."""
    uneven = [k for k in counts if global_batch % k or global_batch < k]
    if not uneven:
        return ""
    step = math.lcm(*counts)
    below, above = global_batch // step * step, (global_batch // step + 1) * step
    choices = f"{below} or {above}" if below else str(above)
    return (f"Strong scaling skips the counts global batch {global_batch} does not split "
            f"evenly over ({', '.join(map(str, uneven))}); a global batch of {choices} "
            f"(multiples of {step}) splits over every count.")


# -- figures ---------------------------------------------------------------------
def step_stats(times_s: Sequence[float]) -> tuple[float, float, float]:
    """(median, p10, p90) of step times; p10/p90 interpolate like numpy's default."""
    if not times_s:
        raise ValueError("no step times")
    ordered = sorted(times_s)
    return statistics.median(ordered), _quantile(ordered, 0.10), _quantile(ordered, 0.90)


def _quantile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def compute_points(results: Iterable[CountResult]) -> tuple[list[ScalePoint], int | None]:
    """Figures per count, and the baseline count their speed-ups are against."""
    raw: list[ScalePoint] = []
    for r in sorted(results, key=lambda r: r.devices):
        if r.status is not PointStatus.OK or not r.step_times_s:
            status = r.status if r.status is not PointStatus.OK else PointStatus.FAILED
            raw.append(ScalePoint(r.devices, r.global_batch, r.batch_per_replica, status,
                                  message=r.message or "no timed steps were reported"))
            continue
        median, p10, p90 = step_stats(r.step_times_s)
        raw.append(ScalePoint(
            r.devices, r.global_batch, r.batch_per_replica,
            samples_per_s=r.global_batch / median,
            mean_samples_per_s=r.global_batch * len(r.step_times_s) / sum(r.step_times_s),
            step_median_s=median, step_p10_s=p10, step_p90_s=p90,
            timed_steps=len(r.step_times_s), message=r.message, input_wait=r.input_wait))
    ran = [p for p in raw if p.ok]
    if not ran:
        return raw, None
    base = ran[0]
    assert base.samples_per_s is not None
    per_device = base.samples_per_s / base.devices  # linear up to the baseline, if not 1
    points = []
    for p in raw:
        if p.ok and p.samples_per_s is not None:
            # The baseline is exact by definition (x / (x / b) need not be b in floats).
            speedup = p.devices if p is base else p.samples_per_s / per_device
            p = dataclasses.replace(p, speedup=speedup, efficiency=speedup / p.devices)
        points.append(p)
    return points, base.devices


def recommend(points: Sequence[ScalePoint], threshold: float = DEFAULT_THRESHOLD,
              kind: str = "gpu") -> Recommendation | None:
    """The largest count whose efficiency is at least `threshold`, with a sentence of why."""
    ran = [p for p in points if p.ok and p.efficiency is not None]
    if not ran:
        return None
    # The baseline's efficiency is 1 by definition, so some count always qualifies.
    best = [p for p in ran if p.efficiency >= threshold or p is ran[0]][-1]  # type: ignore[operator]
    unit = device_word(kind, best.devices)
    higher = [p for p in ran if p.devices > best.devices]
    failed = [p for p in points if p.status is PointStatus.FAILED and p.devices > best.devices]
    if len(ran) == 1:
        sentence = (f"Only {best.devices} {unit} measured: nothing to compare with, so no "
                    f"recommendation beyond it.")
    elif not higher:
        sentence = (f"Use {'' if failed else 'all '}{best.devices} {unit}: efficiency is "
                    f"{best.efficiency:.0%} there (threshold {threshold:.0%}), "
                    f"{best.speedup:.2f}x the throughput of one."
                    + ("" if failed else " Larger counts were not measured."))
    else:
        nxt = higher[0]
        sentence = (f"Use {best.devices} {unit}: beyond that, efficiency falls under "
                    f"{threshold:.0%} ({nxt.devices} {device_word(kind, nxt.devices)}: "
                    f"{nxt.efficiency:.0%}, {nxt.speedup:.2f}x the throughput of one for "
                    f"{nxt.devices}x the devices).")
    if failed:
        sentence += f" {_failed_text(failed, kind)}"
    return Recommendation(best.devices, sentence)


def _failed_text(failed: Sequence[ScalePoint], kind: str) -> str:
    counts = ", ".join(str(p.devices) for p in failed)
    return f"{counts} {device_word(kind, 2)} failed (see the table)."


def build_report(results: Iterable[CountResult], *, mode: ScalingMode, device_kind: str,
                 threshold: float = DEFAULT_THRESHOLD, steps: int = DEFAULT_STEPS,
                 warmup: int = DEFAULT_WARMUP, model: str = "", data: str = "",
                 device_names: Sequence[str] = (), notes: Sequence[str] = ()) -> ScalingReport:
    points, baseline = compute_points(results)
    notes = list(notes)
    if baseline is not None and baseline != 1:
        notes.append(f"No 1-device figure: speed-up and efficiency are against "
                     f"{baseline} {device_word(device_kind, baseline)}, taken as linear up to "
                     f"there.")
    return ScalingReport(
        mode=mode, device_kind=device_kind, points=tuple(points), threshold=threshold,
        baseline_devices=baseline, recommendation=recommend(points, threshold, device_kind),
        steps=steps, warmup=warmup, model=model, data=data, device_names=tuple(device_names),
        notes=tuple(notes))


# -- output ----------------------------------------------------------------------
def write_csv(report: ScalingReport, path: Path) -> Path:
    """One row per count (CSV_COLUMNS); numbers unrounded, blank where not measured."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(csv_text(report), encoding="utf-8", newline="")
    tmp.replace(path)
    return path


def csv_text(report: ScalingReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in report.points:
        writer.writerow([
            p.devices, p.global_batch, p.batch_per_replica, _num(p.samples_per_s),
            _num(p.speedup), _num(p.efficiency), _num(p.step_median_s, 1000),
            _num(p.step_p10_s, 1000), _num(p.step_p90_s, 1000), p.timed_steps,
            p.status.value, p.message, _num(p.input_wait),
        ])
    return buffer.getvalue()


def _num(value: float | None, scale: float = 1.0) -> str:
    return "" if value is None else f"{value * scale:.6g}"


def format_table(report: ScalingReport) -> str:
    """The terminal table, then the recommendation and any notes."""
    header = ("DEVICES", "GLOBAL BATCH", "SAMPLES/S", "SPEED-UP", "EFFICIENCY",
              "INPUT WAIT", "STEP MEDIAN (P10-P90)")
    rows = [header]
    for p in report.points:
        batch = f"{p.global_batch} ({p.batch_per_replica}/dev)" if p.batch_per_replica else (
            f"{p.global_batch} (uneven)")
        if p.ok:
            rows.append((str(p.devices), batch, f"{p.samples_per_s:,.0f}", f"{p.speedup:.2f}x",
                         f"{p.efficiency:.0%}", wait_text(p.input_wait), _step_text(p)))
        else:
            rows.append((str(p.devices), batch, p.status.value, "-", "-", "-", "-"))
    right = (True, True, True, True, True, True, False)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if r else cell.ljust(w)
                       for cell, w, r in zip(row, widths, right, strict=True)).rstrip()
             for row in rows]
    for p in report.points:
        if not p.ok and p.message:
            lines.append(f"{p.devices} {device_word(report.device_kind, p.devices)} "
                         f"{p.status.value}: {p.message}")
    if report.recommendation is not None:
        lines.append(report.recommendation.sentence)
    lines.extend(report.notes)
    return "\n".join(lines)


def _step_text(p: ScalePoint) -> str:
    assert p.step_median_s is not None and p.step_p10_s is not None and p.step_p90_s is not None
    return (f"{_ms(p.step_median_s)} ({_ms(p.step_p10_s)}-{_ms(p.step_p90_s)}) ms")


def wait_text(share: float | None) -> str:
    """The input wait per step as the verdict words it (core/runs/diagnosis.py)."""
    return "-" if share is None else f"{share * 100:.0f} %"


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def describe(report: ScalingReport) -> str:
    """One line: what was measured, for titles and the CLI's header."""
    mode = ("weak scaling: batch per device fixed" if report.mode is ScalingMode.WEAK
            else "strong scaling: global batch fixed")
    return (f"{report.model or 'model'} on {report.data or 'data'}, {mode}; "
            f"{report.steps} timed steps after {report.warmup} warm-up")


__all__ = [
    "CSV_COLUMNS", "DEFAULT_STEPS", "DEFAULT_THRESHOLD", "DEFAULT_WARMUP", "CountResult",
    "PointStatus", "Recommendation", "ScalePoint", "ScalingMode", "ScalingReport", "batch_for",
    "build_report", "compute_points", "csv_text", "default_counts", "describe", "device_word",
    "even_batches_note",
    "format_table", "parse_counts", "recommend", "step_stats", "wait_text", "write_csv",
]
