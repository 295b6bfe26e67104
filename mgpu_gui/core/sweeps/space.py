"""What a sweep can vary, and the values of one swept setting as a user writes them.

The sweepable settings are derived from RunConfig's fields (nested ones dotted, as
compare.flatten names them), so a new run setting can be swept with no list to update.
A value is typed by its field and checked by RunConfig.problems(), the one validator;
a bad one is a ConfigError under the setting's name, which the CLI shows as its flag.

Values: a list (`1e-3,3e-3`, `adam,sgd`, `on,off`; `;` between values that hold commas,
`off;flip,rotate=0.1`), a log range `log:1e-4..1e-2:5` or a
linear range `lin:16..64:4` (ends included). A grid takes a range's points; a random
search draws from the whole range (log-uniformly for a log range), so there its count
may be left out.
"""

from __future__ import annotations

import dataclasses
import math
import random
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from functools import cache
from types import MappingProxyType, NoneType, UnionType
from typing import Any

from mgpu_gui.core.config import CACHE_MODES, OPTIMIZERS, PRECISIONS, RunConfig
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.compare import NOT_TRAINING

# seed: a sweep's repeats vary it. allow_unsafe_code: consent to run a file's code is
# given by the user for one file, never tried out.
NOT_SWEPT = NOT_TRAINING | {"seed", "allow_unsafe_code"}
# The text settings with a closed set of values (the CLI offers the same constants).
CLOSED_TEXT = {"optimizer": OPTIMIZERS, "precision": PRECISIONS, "cache": CACHE_MODES}
_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")
_DIGITS = 6  # significant digits a computed value keeps: 1e-3, not 0.0009999999999999998


class Scale(StrEnum):
    LIST = "list"
    LINEAR = "lin"
    LOG = "log"


@dataclass(frozen=True)
class Setting:
    """One sweepable RunConfig field: its dotted name, type and default."""

    name: str
    kind: type  # bool, int, float, str or a StrEnum
    optional: bool  # None is one of its values ("none")
    default: Any

    @property
    def numeric(self) -> bool:
        return self.kind in (int, float)

    @property
    def choices(self) -> tuple[Any, ...]:
        """Every value of a closed set (bools, enums, optimizers...); () for an open one."""
        if self.kind is bool:
            return (False, True)
        if issubclass(self.kind, Enum):
            return tuple(self.kind)
        return CLOSED_TEXT.get(self.name, ())

    def parse(self, text: str) -> Any:
        """One value from its text; ValueError says what was expected."""
        word = text.strip()
        if self.optional and word.lower() == "none":
            return None
        if self.kind is bool:
            if word.lower() in _TRUE + _FALSE:
                return word.lower() in _TRUE
            raise ValueError(f"{word!r} is not on or off")
        if self.kind is int:
            try:
                return int(word)
            except ValueError:
                raise ValueError(f"{word!r} is not a whole number") from None
        if self.kind is float:
            try:
                return float(word)
            except ValueError:
                raise ValueError(f"{word!r} is not a number") from None
        if issubclass(self.kind, Enum):
            try:
                return self.kind(word.lower())
            except ValueError:
                raise ValueError(f"{word!r} is not one of "
                                 f"{', '.join(m.value for m in self.kind)}") from None
        if self.default == "" and word.lower() in _FALSE:
            return ""  # a text setting that is off when empty (augment)
        if not word:
            raise ValueError("an empty value")
        return word


@cache
def sweepable() -> Mapping[str, Setting]:
    """Every RunConfig setting a sweep can vary, in RunConfig's order, by dotted name."""
    return MappingProxyType({s.name: s for s in _settings(RunConfig, RunConfig(), "")})


def _settings(cls: type, defaults: Any, prefix: str) -> Iterator[Setting]:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        name, hint = prefix + field.name, hints[field.name]
        default = getattr(defaults, field.name)
        if dataclasses.is_dataclass(hint):
            yield from _settings(hint, default, name + ".")
            continue
        members = typing.get_args(hint) if isinstance(hint, UnionType) else (hint,)
        kinds = [m for m in members if m is not NoneType]
        # Tuples (metrics, image size, GPUs by name) have no one-value-per-trial text.
        if (name not in NOT_SWEPT and len(kinds) == 1 and isinstance(kinds[0], type)
                and (kinds[0] in (bool, int, float, str) or issubclass(kinds[0], StrEnum))):
            yield Setting(name, kinds[0], NoneType in members, default)


def setting_named(name: str) -> Setting:
    found = sweepable().get(name)
    if found is None:
        raise ConfigError([(name, "a sweep cannot vary this; it varies one of "
                                  f"{', '.join(sweepable())}")])
    return found


def value_of(config: Any, name: str) -> Any:
    """A (dotted) setting's value in a config."""
    for part in name.split("."):
        config = getattr(config, part)
    return config


def with_value(config: Any, name: str, value: Any) -> Any:
    """The config with one (dotted) setting changed; the nested dataclasses are copied."""
    head, _, rest = name.partition(".")
    if rest:
        value = with_value(getattr(config, head), rest, value)
    return dataclasses.replace(config, **{head: value})


def value_text(value: Any) -> str:
    """A value as `parse` reads it back (floats exactly: the store keeps this text)."""
    if value is None:
        return "none"
    if value == "":
        return "off"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Enum):
        return str(value.value)
    return repr(value) if isinstance(value, float) else str(value)


def tidy(value: float) -> float:
    return float(f"{value:.{_DIGITS}g}")


@dataclass(frozen=True)
class Parameter:
    """One swept setting and its values: a list, or a range whose grid points are `values`
    (none when its count was left out: then only a random search can draw from it)."""

    name: str
    values: tuple[Any, ...]
    scale: Scale = Scale.LIST
    low: float | None = None
    high: float | None = None

    @property
    def setting(self) -> Setting:
        return setting_named(self.name)

    def to_dict(self) -> dict[str, Any]:
        """For the store: exact even for an extended range, whose points are uneven."""
        return {"name": self.name, "scale": self.scale.value, "low": self.low,
                "high": self.high, "values": [value_text(v) for v in self.values]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Parameter:
        found = setting_named(data["name"])
        return cls(found.name, tuple(found.parse(v) for v in data["values"]),
                   Scale(data["scale"]), data["low"], data["high"])

    @property
    def text(self) -> str:
        """The values as a user writes them (parse_parameter reads this back)."""
        if self.scale is Scale.LIST:
            words = [value_text(v) for v in self.values]
            return (";" if any("," in w for w in words) else ",").join(words)
        count = f":{len(self.values)}" if self.values else ""
        return f"{self.scale.value}:{self.low!r}..{self.high!r}{count}"

    def draw(self, rng: random.Random) -> Any:
        """One value at random: a list's values alike, a range uniformly on its scale."""
        if self.scale is Scale.LIST:
            return rng.choice(self.values)
        assert self.low is not None and self.high is not None
        if self.scale is Scale.LOG:
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return round(x) if self.setting.kind is int else tidy(x)

    def merged(self, more: Parameter) -> Parameter:
        """This parameter with `more`'s values added (a sweep extended): two ranges of one
        scale make one range over both; anything else becomes a list of both's points."""
        values = tuple(dict.fromkeys(self.values + more.values))
        if self.scale is more.scale is not Scale.LIST:
            return dataclasses.replace(self, values=values, low=min(self.low, more.low),
                                       high=max(self.high, more.high))
        if not (self.values and more.values):
            raise ConfigError([(self.name, f"{more.text} cannot be added to {self.text}: "
                                           "give the range's count of values")])
        return Parameter(self.name, values)


def parse_parameter(name: str, text: str, base: RunConfig) -> Parameter:
    """A swept setting's values from their text, typed and checked against `base` (each
    value in it must pass RunConfig.problems()); ConfigError names the setting."""
    parameter = _read(name, text)
    found = parameter.setting
    checked = parameter.values or (found.kind(parameter.low), found.kind(parameter.high))
    problems = [(name, message if item in message else f"{item}: {message}")
                for value in checked
                for item in (value_text(value),)
                for field, message in with_value(base, name, value).problems()
                if field == name]
    if problems:
        raise ConfigError(problems)
    return parameter


def _read(name: str, text: str) -> Parameter:
    found = setting_named(name)
    try:
        return _parse(found, text.strip())
    except ValueError as error:
        raise ConfigError([(name, str(error))]) from None


def _parse(found: Setting, text: str) -> Parameter:
    prefix, colon, rest = text.partition(":")
    if colon and prefix.lower() in (Scale.LOG.value, Scale.LINEAR.value):
        return _parse_range(found, Scale(prefix.lower()), rest)
    values = tuple(found.parse(word) for word in text.split(";" if ";" in text else ","))
    if len(set(values)) < len(values):
        raise ValueError(f"{text!r} names a value twice")
    return Parameter(found.name, values)


def _parse_range(found: Setting, scale: Scale, text: str) -> Parameter:
    form = f"{scale.value}:LOW..HIGH[:COUNT], e.g. {scale.value}:1e-4..1e-2:5"
    if not found.numeric:
        raise ValueError("a range needs a number setting; give a list of values instead")
    ends, _, count_text = text.partition(":")
    low_text, dots, high_text = ends.partition("..")
    try:
        low, high = float(low_text), float(high_text)
        count = int(count_text) if count_text else None
    except ValueError:
        raise ValueError(f"{scale.value}:{text!r} is not {form}") from None
    if not dots or not low < high:
        raise ValueError(f"{scale.value}:{text!r}: give LOW..HIGH with LOW below HIGH ({form})")
    if scale is Scale.LOG and low <= 0:
        raise ValueError(f"a log range starts above 0, not at {low_text}")
    if count is not None and count < 2:
        raise ValueError(f"a range takes 2 or more values, not {count}")
    points: tuple[Any, ...] = ()
    if count is not None:
        if scale is Scale.LOG:
            low_log, step = math.log(low), (math.log(high) - math.log(low)) / (count - 1)
            raw = [math.exp(low_log + i * step) for i in range(count)]
        else:
            raw = [low + i * (high - low) / (count - 1) for i in range(count)]
        points = tuple(dict.fromkeys(round(x) if found.kind is int else tidy(x) for x in raw))
    return Parameter(found.name, points, scale, low, high)
