"""The per-GPU batch-size finder: which batches to try, and what the probes say.

Pure and light (no TensorFlow, no Qt, no processes): each probe (one batch on
one device, in a child process of its own, see `batch_probe_runner.py` and
`mgpu_gui.processes.batch_probe`) reports whether it fit and its peak memory;
this module chooses the next batch to try, ends the search, and turns the
probes into a `BatchReport` with a recommendation.

The search:
- batches per device grow geometrically (start, x2, x4, ...) up to the largest
  allowed, until the first batch that does not fit; the largest allowed is the
  settings' or, when smaller, the largest that leaves `min_steps` (8) steps per
  epoch of the training set on the run's devices (`data_cap`): a batch that fits
  in memory but makes an epoch one or two updates long trains badly and shows
  one point per epoch; when even a batch of 1 per device leaves fewer steps,
  the cap is 1 and the report says so;
- then a binary search between the largest batch that fit and the smallest
  that did not, on multiples of `multiple` (8), until the two are at most
  `precision` (10 %) of the fitting one apart (or one multiple apart);
- when even the first batch does not fit, it halves down to 1;
- a probe that ran out of memory before its first training step (TensorFlow,
  the model and the data alone) ends the search: no batch can fit then, and an
  error that is not about memory ends it too (every batch would meet it).

"Fits" means the probe trained its steps without running out of memory and,
when a memory cap is set, its peak stayed at or under the cap. The
recommendation is the largest batch that fit less a safety margin (10 % fewer
samples, rounded down to a multiple of 8), also when every batch tried fit: a
real run adds validation batches, checkpoints and, on several GPUs, all-reduce
buffers that one probe does not see, and a batch that fit may have fit by a
hair. Under the data cap the margin only adds steps.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mgpu_gui.core.datasets.batching import steps
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.plain import to_plain

DEFAULT_START = 8
DEFAULT_MAX_BATCH = 4096
DEFAULT_MULTIPLE = 8
DEFAULT_PRECISION = 0.10
DEFAULT_MARGIN = 0.10
DEFAULT_STEPS = 2  # the first traces and compiles; the second runs with every slot built
DEFAULT_MIN_STEPS = 8  # steps per epoch the recommendation leaves, data permitting
GROWTH = 2

# How TensorFlow and CUDA say "out of memory" besides ResourceExhaustedError.
_OOM_TEXT = re.compile(r"out of memory|OOM when allocating|CUDNN_STATUS_ALLOC_FAILED|"
                       r"Dst tensor is not initialized|failed to allocate memory|"
                       r"CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)


# JAX's runtime error (JaxRuntimeError in jax 0.10, XlaRuntimeError in older releases):
# its text starts with XLA's status, RESOURCE_EXHAUSTED when an allocation failed.
_XLA_ERRORS = frozenset({"JaxRuntimeError", "XlaRuntimeError"})


class ProbeStatus(StrEnum):
    FITS = "fits"
    TOO_BIG = "too big"  # out of memory, over the cap, or the probe died (killed for memory)
    ERROR = "error"  # an error no batch size would avoid: the search stops
    CANCELLED = "cancelled"


class Ended(StrEnum):
    """Why the search stopped."""

    BRACKETED = "bracketed"  # the largest fit and the smallest misfit are close enough
    MAX_BATCH = "max batch"  # every batch up to the largest allowed fit
    DATA_LIMIT = "data limit"  # ... and larger leave the training set too few steps
    NOTHING_FITS = "nothing fits"
    ERROR = "error"
    CANCELLED = "cancelled"
    RUNNING = "running"  # a report of the probes so far


@dataclass(frozen=True)
class ProbeResult:
    """One probe: a batch on one device, whether it fit and the memory it took."""

    batch: int
    status: ProbeStatus
    peak_bytes: int | None = None  # device memory on a GPU, resident memory on CPU
    base_bytes: int | None = None  # the peak before the first step: TF, model, data
    seconds: float | None = None
    stage: str = "training"  # "setup" when it ended before the first training step
    message: str = ""
    error_type: str = ""

    @property
    def fits(self) -> bool:
        return self.status is ProbeStatus.FITS

    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        return cls(**{**values, "batch": int(data["batch"]),
                      "status": ProbeStatus(data["status"])})


@dataclass(frozen=True)
class SearchSettings:
    start: int = DEFAULT_START
    max_batch: int = DEFAULT_MAX_BATCH
    multiple: int = DEFAULT_MULTIPLE
    precision: float = DEFAULT_PRECISION  # stop when the bracket is this fraction wide
    margin: float = DEFAULT_MARGIN  # the recommendation keeps this fraction of samples free
    steps: int = DEFAULT_STEPS  # training steps per probe
    min_steps: int = DEFAULT_MIN_STEPS  # steps per epoch a batch must leave (data permitting)

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if self.start < 1:
            found.append(("start", f"must be at least 1, got {self.start}"))
        if self.max_batch < max(1, self.start):
            found.append(("max_batch", f"must be at least the first batch ({self.start}), "
                                       f"got {self.max_batch}"))
        if self.multiple < 1:
            found.append(("multiple", f"must be at least 1, got {self.multiple}"))
        if not 0 <= self.precision < 1:
            found.append(("precision", f"must be in [0, 1), got {self.precision}"))
        if not 0 <= self.margin < 1:
            found.append(("margin", f"must be in [0, 1), got {self.margin}"))
        if self.steps < 1:
            found.append(("steps", f"must be at least 1, got {self.steps}"))
        if self.min_steps < 1:
            found.append(("min_steps", f"must be at least 1, got {self.min_steps}"))
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchSettings:
        return cls(**data)


# -- the search ---------------------------------------------------------------------
def bracket(results: Sequence[ProbeResult]) -> tuple[int, int | None]:
    """(largest batch that fit or 0, smallest batch that did not or None)."""
    lo = max((r.batch for r in results if r.fits), default=0)
    too_big = [r.batch for r in results if r.status is ProbeStatus.TOO_BIG and r.batch > lo]
    return lo, min(too_big, default=None)


def next_batch(settings: SearchSettings, results: Sequence[ProbeResult],
               max_batch: int | None = None) -> int | None:
    """The batch to probe next, or None when the search is over.

    `max_batch` (default the settings') is the largest batch allowed: the
    settings' or what the training set allows, whichever is smaller.
    """
    top = settings.max_batch if max_batch is None else max_batch
    if top < 1 or any(r.status in (ProbeStatus.ERROR, ProbeStatus.CANCELLED) for r in results):
        return None
    if any(r.status is ProbeStatus.TOO_BIG and r.stage == "setup" for r in results):
        return None  # out of memory before any batch ran: a smaller batch cannot help
    lo, hi = bracket(results)
    if not results:
        return min(settings.start, top)
    if hi is None:  # everything so far fit: grow
        return None if lo >= top else min(lo * GROWTH, top)
    step = settings.multiple if lo >= settings.multiple else 1
    if hi - lo <= max(step, settings.precision * lo):
        return None
    half = (hi - lo) // 2
    mid = lo + max(step, half // step * step)
    return mid if lo < mid < hi else None


def search(settings: SearchSettings, probe: Callable[[int], ProbeResult], *,
           max_batch: int | None = None,
           on_result: Callable[[ProbeResult], None] | None = None) -> list[ProbeResult]:
    """Run the whole search with `probe` (a process per batch, or a fake in tests)."""
    results: list[ProbeResult] = []
    while (batch := next_batch(settings, results, max_batch)) is not None:
        result = probe(batch)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def data_cap(train_samples: int, devices: int, min_steps: int) -> tuple[int, str]:
    """The largest batch per device that leaves `min_steps` full steps per epoch of
    `train_samples` on `devices` (at least 1, which may leave fewer: the note says so),
    and a note when the cap is below what memory could allow."""
    cap = train_samples // (devices * min_steps)
    on = f"on {devices} device{'s' if devices != 1 else ''}"
    if cap < 1:
        return 1, (f"The training set ({train_samples:,} samples) is too small for "
                   f"{min_steps} steps per epoch {on}: even a batch of 1 per device leaves "
                   f"{steps(train_samples, devices)}.")
    return cap, (f"The training set ({train_samples:,} samples) allows at most {cap} per "
                 f"device {on} for at least {min_steps} steps per epoch (fewer steps make "
                 f"fewer updates per epoch).")


def recommended_batch(largest: int, margin: float, multiple: int) -> int:
    """`largest` less `margin`, rounded down to a multiple of `multiple` (at least 1)."""
    kept = largest * (1 - margin)
    rounded = int(kept // multiple * multiple)
    return rounded if rounded >= 1 else max(1, int(kept))


# -- the report -----------------------------------------------------------------------
@dataclass(frozen=True)
class BatchReport:
    """What the search found, and for which run."""

    probes: tuple[ProbeResult, ...]
    settings: SearchSettings
    device_kind: str  # "gpu" or "cpu"
    device_name: str  # the device the probes ran on
    devices: int  # the run's devices: the global batch is per device x this
    max_batch: int  # the largest batch allowed (settings or training set)
    cap_bytes: int | None = None
    cap_source: str = ""  # "given", "available memory"
    data_limit: int | None = None  # the largest batch per device `data_cap` allows
    train_samples: int | None = None
    largest_fit: int | None = None
    recommended: int | None = None
    ended: Ended = Ended.RUNNING
    model: str = ""
    data: str = ""
    notes: tuple[str, ...] = ()

    @property
    def global_batch(self) -> int | None:
        return None if self.recommended is None else self.recommended * self.devices

    @property
    def steps_per_epoch(self) -> int | None:
        """Full steps per epoch at the recommendation (the partial last batch is dropped)."""
        if self.global_batch is None or self.train_samples is None:
            return None
        return steps(self.train_samples, self.global_batch)

    @property
    def per_device(self) -> str:
        return "per GPU" if self.device_kind == "gpu" else "per CPU replica"

    def probe_for(self, batch: int | None) -> ProbeResult | None:
        return next((p for p in self.probes if p.batch == batch), None)

    def to_dict(self) -> dict[str, Any]:
        data = to_plain(dataclasses.asdict(self))
        data["global_batch"] = self.global_batch
        data["summary"] = describe(self)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchReport:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        return cls(**{**values,
                      "probes": tuple(ProbeResult.from_dict(p) for p in data["probes"]),
                      "settings": SearchSettings.from_dict(data["settings"]),
                      "ended": Ended(data["ended"]), "notes": tuple(data.get("notes", ()))})


def build_report(results: Sequence[ProbeResult], settings: SearchSettings, *, device_kind: str,
                 device_name: str, devices: int, max_batch: int, cap_bytes: int | None = None,
                 cap_source: str = "", data_limit: int | None = None,
                 train_samples: int | None = None, model: str = "", data: str = "",
                 notes: Sequence[str] = (), finished: bool = True) -> BatchReport:
    lo, hi = bracket(results)
    ended = _ended(results, settings, max_batch, data_limit, lo, hi, finished)
    recommended = None
    if lo and ended in (Ended.BRACKETED, Ended.MAX_BATCH, Ended.DATA_LIMIT):
        recommended = recommended_batch(lo, settings.margin, settings.multiple)
    return BatchReport(
        probes=tuple(results), settings=settings, device_kind=device_kind,
        device_name=device_name, devices=devices, max_batch=max_batch, cap_bytes=cap_bytes,
        cap_source=cap_source, data_limit=data_limit, train_samples=train_samples,
        largest_fit=lo or None,
        recommended=recommended, ended=ended, model=model, data=data, notes=tuple(notes))


def _ended(results: Sequence[ProbeResult], settings: SearchSettings, max_batch: int,
           data_limit: int | None, lo: int, hi: int | None, finished: bool) -> Ended:
    if any(r.status is ProbeStatus.CANCELLED for r in results):
        return Ended.CANCELLED
    if any(r.status is ProbeStatus.ERROR for r in results):
        return Ended.ERROR
    if not finished:
        return Ended.RUNNING
    if lo == 0:
        return Ended.NOTHING_FITS
    if hi is None and lo >= max_batch:
        data_bound = data_limit is not None and data_limit == max_batch < settings.max_batch
        return Ended.DATA_LIMIT if data_bound else Ended.MAX_BATCH
    return Ended.BRACKETED


# -- text -------------------------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2,
          "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3,
          "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """Bytes from '600MB', '1.5 GiB', '2G', '800000000'. MB and GB count in powers of
    1000, MiB and GiB (and the bare M, G) in powers of 1024."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise UserError(f"memory size {text!r}: give a number with a unit, e.g. 600MB, "
                        f"1.5GiB or 2G.")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value < 1:
        raise UserError(f"memory size {text!r} must be more than 0 bytes.")
    return value


def format_memory(size: int | None) -> str:
    """In MB and GB (powers of 1000), as a cap is most often typed."""
    if size is None:
        return "–"
    if size >= 10 ** 10:
        return f"{size / 1e9:.1f} GB"
    if size >= 10 ** 6:
        return f"{size / 1e6:,.0f} MB"
    return f"{size / 1e3:,.0f} kB"


def peak_text(result: ProbeResult) -> str:
    """The probe's peak; "> X" when it was stopped as it passed the cap (at least X)."""
    peak = format_memory(result.peak_bytes)
    if result.status is ProbeStatus.TOO_BIG and result.peak_bytes is not None and (
            result.message.startswith("over the cap")):
        return "> " + peak
    return peak


def is_out_of_memory(error_type: str, text: str) -> bool:
    """Whether an exception (by class name and message) means the device ran out of memory."""
    if error_type in _XLA_ERRORS and text.startswith("RESOURCE_EXHAUSTED"):
        return True
    return error_type == "ResourceExhaustedError" or bool(_OOM_TEXT.search(text))


def probe_verdict(result: ProbeResult, cap_bytes: int | None) -> str:
    """One probe in words, for the table and the dialog."""
    if result.fits:
        if cap_bytes is not None and result.peak_bytes is not None:
            return f"fits ({result.peak_bytes / cap_bytes:.0%} of the cap)"
        return "fits"
    if result.message:
        return f"{result.status.value}: {result.message}"
    over = (result.status is ProbeStatus.TOO_BIG and cap_bytes is not None
            and result.peak_bytes is not None and result.peak_bytes > cap_bytes)
    return f"{result.status.value}: over the cap" if over else result.status.value


def format_table(report: BatchReport) -> str:
    rows = [("BATCH", "PEAK MEMORY", "TIME", "RESULT")]
    for p in report.probes:
        took = "–" if p.seconds is None else f"{p.seconds:.1f} s"
        rows.append((str(p.batch), peak_text(p), took, probe_verdict(p, report.cap_bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0].rjust(widths[0])}  {r[1].rjust(widths[1])}  "
                     f"{r[2].rjust(widths[2])}  {r[3]}" for r in rows)


def limit_text(report: BatchReport) -> str:
    if report.cap_bytes is None:
        return "the device's memory"
    cap = format_memory(report.cap_bytes)
    return f"the {cap} cap" + (" (the memory available when it started)"
                               if report.cap_source == "available memory" else "")


def describe(report: BatchReport) -> str:
    """The result in a few sentences: what fits, what to use, and the global batch."""
    per, ended = report.per_device, report.ended
    largest = report.probe_for(report.largest_fit)
    lo, hi = bracket(report.probes)
    where = f"on {report.device_name}" if report.device_name else ""
    if ended is Ended.ERROR:
        failed = next(p for p in report.probes if p.status is ProbeStatus.ERROR)
        return (f"The probe with a batch of {failed.batch} failed with an error that no batch "
                f"size avoids, so the search stopped: {failed.message}")
    if ended is Ended.NOTHING_FITS:
        first = report.probes[0] if report.probes else None
        base = next((p.base_bytes for p in report.probes if p.base_bytes), None)
        alone = (f" The framework, the model and the data alone took {format_memory(base)}."
                 if base else "")
        smallest = min((p.batch for p in report.probes), default=1)
        why = first.message if first is not None and first.message else "out of memory"
        return (f"Not even a batch of {smallest} {per} fits {where} within "
                f"{limit_text(report)} ({why}).{alone} Use a smaller model or input, or a "
                f"device with more memory" + (", or raise the cap." if report.cap_bytes else "."))
    if lo == 0 or largest is None:
        return ("Cancelled before any batch fit." if ended is Ended.CANCELLED
                else "Searching…")
    peak = f" (peak {format_memory(largest.peak_bytes)})" if largest.peak_bytes else ""
    text = f"The largest batch that fits {where} is {lo} {per}{peak}"
    if hi is not None:
        text += f"; {hi} did not fit within {limit_text(report)}."
    elif ended is Ended.DATA_LIMIT:
        text += (f", the most the training set allows for {report.settings.min_steps} steps "
                 f"per epoch on {report.devices} {_devices(report)}; memory was not the "
                 f"limit.")
    elif ended is Ended.MAX_BATCH:
        text += (", the largest allowed: every batch tried fit, so memory was not the limit "
                 "(raise the largest batch to look further).")
    else:
        text += "."
    if ended is Ended.CANCELLED:
        return text + " The search was cancelled, so there is no recommendation."
    if ended is Ended.RUNNING or report.recommended is None:
        return text
    if report.recommended == lo:
        text += f" Use {report.recommended} {per}."
    else:
        text += (f" Use {report.recommended} {per}: {report.settings.margin:.0%} below it "
                 f"(rounded to a multiple of {report.settings.multiple}) as headroom for what a "
                 f"real run adds (validation batches, and all-reduce buffers on several devices).")
    text += (f" Global batch: {report.global_batch} = {report.recommended} x {report.devices} "
             f"{_devices(report)}")
    if report.steps_per_epoch is not None:
        text += (f", {report.steps_per_epoch} steps per epoch of the {report.train_samples:,} "
                 f"training samples")
    return text + "."


def use_text(report: BatchReport) -> str:
    """What "use it" does: "Use 72 per CPU replica (144 global, 9 steps per epoch)"."""
    if report.recommended is None:
        return "Use"
    what = [f"{report.global_batch} global"]
    if report.steps_per_epoch is not None:
        what.append(f"{report.steps_per_epoch} step{'s' if report.steps_per_epoch != 1 else ''}"
                    f" per epoch")
    return f"Use {report.recommended} {report.per_device} ({', '.join(what)})"


def _devices(report: BatchReport) -> str:
    one = "GPU" if report.device_kind == "gpu" else "CPU replica"
    return one if report.devices == 1 else one + "s"
