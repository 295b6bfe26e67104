"""Repeats of one setting with different seeds, drawn as their mean and a band.

The one implementation of seed bands: the Compare dialog groups the selected
runs with it, and a sweep's repeats (its trials that differ only by seed) are
summarised by the same `seed_groups` and `seed_band`. No Qt, no store: the
callers hand in flattened settings (compare.flatten) and per-epoch curves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from mgpu_gui.core.runs.compare import NOT_TRAINING, Settings

SEED = "seed"


class BandKind(StrEnum):
    MIN_MAX = "min-max"
    SD = "sd"  # mean +- 1 sample standard deviation

    @property
    def words(self) -> str:
        return "min–max" if self is BandKind.MIN_MAX else "±1 sd"


def seed_groups(settings: Sequence[Settings]) -> list[list[int]]:
    """Indices of the runs that differ only by seed (and by where they report: name,
    folder), grouped in order of first appearance; a run with no twin is a group of one.
    Unknown settings ({}) never group."""
    groups: dict[object, list[int]] = {}
    for index, flat in enumerate(settings):
        if not flat:
            groups[("unknown", index)] = [index]
            continue
        key = tuple(sorted((name, value) for name, value in flat.items()
                           if name != SEED and name not in NOT_TRAINING))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


@dataclass(frozen=True)
class SeedBand:
    """Per epoch (0-based, every epoch some repeat reached): the repeats' mean, the band
    around it, and how many repeats reached that epoch with a finite value."""

    epochs: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    counts: np.ndarray


def seed_band(curves: Sequence[tuple[Sequence[int], Sequence[float]]],
              kind: BandKind) -> SeedBand:
    """The repeats' (epochs, values) curves as mean and band, epoch by epoch.

    A repeat that stopped earlier or logged NaN counts only where it has a value, so a
    late epoch's band may stand on fewer repeats (`counts` says how many). With one
    value at an epoch the band is that value (an sd needs two)."""
    epochs = sorted({int(e) for xs, _ in curves for e in xs})
    table = np.full((len(curves), len(epochs)), np.nan)
    column = {epoch: i for i, epoch in enumerate(epochs)}
    for row, (xs, ys) in enumerate(curves):
        for x, y in zip(xs, ys, strict=True):
            table[row, column[int(x)]] = y
    finite = np.isfinite(table)
    counts = finite.sum(axis=0)
    table[~finite] = np.nan  # an infinite loss is no value either
    mean = _per_epoch(table, counts > 0, np.nanmean)
    if kind is BandKind.MIN_MAX:
        low = _per_epoch(table, counts > 0, np.nanmin)
        high = _per_epoch(table, counts > 0, np.nanmax)
    else:
        sd = np.where(counts > 0, 0.0, np.nan)
        sd[counts > 1] = np.nanstd(table[:, counts > 1], axis=0, ddof=1)
        low, high = mean - sd, mean + sd
    return SeedBand(np.asarray(epochs, dtype=int), mean, low, high, counts)


def _per_epoch(table: np.ndarray, some: np.ndarray, reduce) -> np.ndarray:
    """`reduce` over the columns that have a value; NaN for the others (numpy would warn
    about an all-NaN column, and warnings are errors in the tests)."""
    out = np.full(table.shape[1], np.nan)
    out[some] = reduce(table[:, some], axis=0)
    return out
