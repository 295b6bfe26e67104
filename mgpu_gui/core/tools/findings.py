"""A finding of the doctor: shared by its TensorFlow half (`doctor`) and its JAX half
(`doctor_jax`), which `doctor.diagnose` joins."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    OK = "ok"  # also what is merely worth knowing; its fix then says what is optional
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    topic: str  # "driver", "tensorflow", "gpus", "cuda", "nccl", "jax"
    message: str
    fix: str = ""  # what to do; empty when nothing needs doing
