"""A sweep's setup (SweepSpec) and the trials it makes, each a RunConfig for the queue.

Grid: the cartesian product of the parameters' values, the first parameter slowest.
Random: `samples` settings drawn, draw i from a generator seeded by (random_seed, i), so
a sweep is reproducible and one extended with more samples keeps its first draws. Each
setting runs `repeats` times with seeds base.seed, base.seed + 1, ...; all settings'
first repeat is queued before any second, so a cut-short sweep still covers the space.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import product
from typing import Any

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.median import MIN_GRACE
from mgpu_gui.core.sweeps.space import (
    Parameter,
    setting_named,
    value_text,
    with_value,
)

DEFAULT_METRIC = "val_loss"
GPUS = "devices.replicas"  # the GPU count a trial claims
# A model file's compiled optimizer ignores these unless its settings are overridden.
COMPILED = ("learning_rate", "optimizer")
_TRIES = 100  # draws of a random setting before the space counts as exhausted


class Search(StrEnum):
    GRID = "grid"
    RANDOM = "random"


@dataclass(frozen=True)
class SweepSpec:
    """Everything a sweep was started with; JSON for the store (to_dict/from_dict)."""

    base: RunConfig
    parameters: tuple[Parameter, ...]
    search: Search = Search.GRID
    samples: int = 0  # random: how many settings to draw
    random_seed: int = 0
    repeats: int = 1
    gpus_per_trial: int | None = None  # None: the base config's; a swept GPU count wins
    max_parallel: int = 1  # trials at once (on disjoint GPUs)
    metric: str = DEFAULT_METRIC
    median_stop: bool = False
    grace: int = MIN_GRACE

    @property
    def swept(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def problems(self, *, compiled_model: bool = False,
                 reported: frozenset[str] | None = None) -> list[tuple[str, str]]:
        """What keeps the sweep from starting, as (setting, message) like RunConfig's.
        `compiled_model`: the model file brings its own compiled optimizer."""
        found = []
        if not self.parameters:
            found.append(("parameters", "choose at least one setting to vary"))
        if len(set(self.swept)) < len(self.swept):
            found.append(("parameters", "a setting is varied twice; give all its values once"))
        if self.search is Search.GRID:
            found += [(p.name, f"{p.text}: a grid needs the range's count of values, e.g. "
                               f"{p.scale.value}:{p.low!r}..{p.high!r}:5")
                      for p in self.parameters if not p.values]
        elif self.samples < 1:
            found.append(("samples", f"a random search draws 1 or more trials, not {self.samples}"))
        for name, value in (("repeats", self.repeats), ("max_parallel", self.max_parallel),
                            ("gpus_per_trial", self.gpus_per_trial)):
            if value is not None and value < 1:
                found.append((name, f"must be at least 1, got {value}"))
        if self.grace < MIN_GRACE:
            found.append(("grace", f"the median rule waits at least {MIN_GRACE} epochs"))
        if not self.metric:
            found.append(("metric", "name the metric that ranks the trials, e.g. val_loss"))
        elif reported is not None and self.metric not in reported:
            found.append(("metric", f"the trials' epochs report {', '.join(sorted(reported))}, "
                                    f"not {self.metric}: no trial could be ranked (or stopped "
                                    "by the median rule)"))
        if compiled_model:
            found += self._compiled_problems()
        return found

    def _compiled_problems(self) -> list[tuple[str, str]]:
        overridden = self._values("override_compile", self.base.override_compile)
        if all(overridden):
            return []
        return [(name, "the model file brings its own compiled optimizer and learning rate, "
                       "so trials would not differ; override its settings (--override-compile)")
                for name in COMPILED if name in self.swept]

    def _values(self, name: str, default: Any) -> tuple[Any, ...]:
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter.values
        return (default,)

    def check(self, *, compiled_model: bool = False,
              reported: frozenset[str] | None = None) -> None:
        found = self.problems(compiled_model=compiled_model, reported=reported)
        if found:
            raise ConfigError(found)

    def extended(self, more: Sequence[Parameter] = (), *, samples: int = 0,
                 repeats: int | None = None) -> SweepSpec:
        """The sweep with more values of its swept settings, `samples` more random draws,
        or `repeats` in all; plan_trials(extended, existing) then gives only the new trials."""
        by_name = {p.name: p for p in self.parameters}
        for parameter in more:
            if parameter.name not in by_name:
                raise ConfigError([(parameter.name, "this sweep does not vary it; start a new "
                                                    "sweep to vary it too")])
            by_name[parameter.name] = by_name[parameter.name].merged(parameter)
        return dataclasses.replace(self, parameters=tuple(by_name.values()),
                                   samples=self.samples + samples,
                                   repeats=max(self.repeats, repeats or 0))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["base"] = self.base.to_dict()
        data["parameters"] = [p.to_dict() for p in self.parameters]
        data["search"] = self.search.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        values = dict(data)
        values["base"] = RunConfig.from_dict(data["base"])
        values["parameters"] = tuple(map(Parameter.from_dict, data["parameters"]))
        values["search"] = Search(data["search"])
        return cls(**values)


@dataclass(frozen=True)
class Trial:
    """One run of a sweep: its swept values (settings by dotted name), which repeat, and the
    RunConfig the queue runs. `index` orders the trials and numbers them for the user."""

    index: int
    values: Mapping[str, Any]
    repeat: int  # 0-based
    config: RunConfig

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes two trials the same one (an extended sweep skips those it has)."""
        return trial_key(self.values, self.repeat)

    @property
    def number(self) -> int:
        """The trial's number as the user sees it everywhere (tables, run names): from 1."""
        return self.index + 1

    @property
    def seed(self) -> int | None:
        return self.config.seed

    @property
    def label(self) -> str:
        words = [f"{name.rpartition('.')[2]}={setting_text(v)}" for name, v in self.values.items()]
        return " ".join(words + [f"seed={setting_text(self.seed)}"])

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "repeat": self.repeat, "config": self.config.to_dict(),
                "values": {name: value_text(v) for name, v in self.values.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        values = {name: setting_named(name).parse(text) for name, text in data["values"].items()}
        return cls(data["index"], values, data["repeat"], RunConfig.from_dict(data["config"]))


def trial_key(values: Mapping[str, Any], repeat: int) -> tuple[Any, ...]:
    return tuple(sorted(values.items())), repeat


def plan_trials(spec: SweepSpec, existing: Sequence[Trial] = ()) -> list[Trial]:
    """The sweep's trials that `existing` (the ones it already has) lacks, numbered on from
    them: all of them for a new sweep, only the new ones for an extended one."""
    if spec.search is Search.GRID:
        settings = [dict(zip(spec.swept, combo, strict=True))
                    for combo in product(*(p.values for p in spec.parameters))]
    else:
        settings = _drawn(spec, existing)
    taken = {trial.key for trial in existing}
    index = max((trial.index for trial in existing), default=-1) + 1
    new = []
    for repeat in range(spec.repeats):
        for values in settings:
            key = trial_key(values, repeat)
            if key not in taken:
                taken.add(key)
                new.append(Trial(index, values, repeat, trial_config(spec, values, repeat)))
                index += 1
    return new


def _drawn(spec: SweepSpec, existing: Sequence[Trial]) -> list[dict[str, Any]]:
    """The settings drawn so far (kept as they are, even if values were added since), then
    fresh draws up to `samples`; a setting is never drawn twice, so a small space of
    lists may yield fewer."""
    settings = []
    for trial in sorted(existing, key=lambda t: t.index):
        if dict(trial.values) not in settings:
            settings.append(dict(trial.values))
    seen = {trial_key(values, 0) for values in settings}
    for draw in range(len(settings), spec.samples):
        rng = random.Random(f"{spec.random_seed}:{draw}")  # str seeds hash stably (sha512)
        for _ in range(_TRIES):
            values = {p.name: p.draw(rng) for p in spec.parameters}
            if trial_key(values, 0) not in seen:
                seen.add(trial_key(values, 0))
                settings.append(values)
                break
    return settings


def trial_config(spec: SweepSpec, values: Mapping[str, Any], repeat: int) -> RunConfig:
    """The base config with a trial's values, its GPU count and its repeat's seed. An
    unseeded base stays unseeded: its repeats differ by chance."""
    config = spec.base
    if spec.gpus_per_trial is not None and GPUS not in values:
        config = with_value(config, GPUS, spec.gpus_per_trial)
    for name, value in values.items():
        config = with_value(config, name, value)
    if config.seed is not None:
        config = config.replace(seed=config.seed + repeat)
    return config


def trial_problems(spec: SweepSpec, trials: Sequence[Trial]) -> list[tuple[str, str]]:
    """Problems a combination of values makes that no value makes alone (epochs 3 with 5
    frozen epochs...), each named once with the first trial that has it."""
    known = set(spec.base.problems())
    found: dict[tuple[str, str], str] = {}
    for trial in trials:
        for problem in trial.config.problems():
            if problem not in known and problem not in found:
                found[problem] = trial.label
    return [(field, f"trial {label}: {message}") for (field, message), label in found.items()]


def reported_metrics(config: RunConfig, compiled_file: bool) -> frozenset[str] | None:
    """The names a run's epochs report (the loss and the compiled metrics, each also as
    `val_`), where the run compiles the model itself (the demo, a built-in, an uncompiled
    file); None where only the built model can tell: a `.py` builder may compile it,
    and a compiled file keeps its own metrics."""
    if compiled_file or config.model.endswith(".py"):
        return None
    names = {"loss", *config.metrics}
    return frozenset(names | {f"val_{name}" for name in names})

