"""What sets a run apart from the run before it of the same name, for the Runs table.

Every run of the demo is named "demo", and a lab's runs of one model share its name:
the table told them apart only through Compare (issue 30, finding 7). Beside each
name the table shows the settings that differ from the previous run of that name
("demo lr=0.01, batch=32"), the settings compared as Compare compares them
(compare.py). Model, data and devices have columns of their own, and where a run
reports is not what it trains: neither is named here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.compare import Settings, differing_settings, flatten, setting_text
from mgpu_gui.core.runs.folder import run_stem
from mgpu_gui.core.runs.store import RunRecord

SHOWN = 3  # settings named beside the name; the rest are counted, all are in the tooltip
# Short names for the settings people vary most; others go by their last dotted part.
SHORT = {"learning_rate": "lr", "batch_per_replica": "batch", "jit_compile": "xla",
         "validation_split": "val_split", "early_stopping.patience": "patience",
         "freeze_epochs": "frozen_epochs"}
_OWN_COLUMNS = ("model", "data", "devices.")


@dataclass(frozen=True)
class RunDifference:
    """`text` beside the run's name; `tip` says from which run and what each was."""

    text: str
    tip: str


def stored_settings(texts: Mapping[int, str]) -> dict[int, Settings]:
    """Runs' stored settings (`RunStore.config_texts`) flattened as Compare flattens them;
    a setting a run's version did not have reads as its default, so an upgrade is not
    a difference. Settings that do not parse are left out."""
    found: dict[int, Settings] = {}
    for run_id, text in texts.items():
        try:
            stored = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(stored, dict):
            found[run_id] = _defaults() | flatten(stored)
    return found


@cache
def _defaults() -> dict:
    return flatten(RunConfig())


def differences(records: Sequence[RunRecord], settings: Mapping[int, Settings]
                ) -> dict[int, RunDifference]:
    """For each run with an earlier run of the same name (the user's run name, else its
    model's, as its folder is named: two runs started in the same second are "demo" and
    "demo-1" there), what differs from the latest such run; runs whose settings are
    unknown (not in `settings`) are skipped."""
    latest: dict[str, RunRecord] = {}
    found: dict[int, RunDifference] = {}
    for record in sorted(records, key=lambda r: (r.created, r.id)):
        if record.id not in settings:
            continue
        flat = settings[record.id]
        name = run_stem(flat.get("run_name"), flat.get("model", ""))
        before = latest.get(name)
        latest[name] = record
        if before is None:
            continue
        pair = (settings[before.id], settings[record.id])
        names = [n for n in differing_settings(pair) if not n.startswith(_OWN_COLUMNS)]
        if names:
            found[record.id] = _difference(names, pair, before)
    return found


def _difference(names: list[str], pair: tuple[Settings, Settings],
                before: RunRecord) -> RunDifference:
    was, now = pair
    shown = [f"{SHORT.get(n, n.rsplit('.', 1)[-1])}={setting_text(now.get(n))}"
             for n in names[:SHOWN]]
    if len(names) > SHOWN:
        shown.append(f"+{len(names) - SHOWN}")
    lines = [f"Differs from run {before.id}, the run before it of that name:"]
    lines += [f"  {n}: {setting_text(now.get(n))} (was {setting_text(was.get(n))})"
              for n in names]
    return RunDifference(", ".join(shown), "\n".join(lines))
