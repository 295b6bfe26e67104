"""What a tool's child is doing, in words: one wording for the CLI and the GUI."""

from __future__ import annotations

from mgpu_gui.core.engines import Engine

FRAMEWORK = {Engine.TENSORFLOW: "TensorFlow", Engine.JAX: "JAX"}
PHASES = {"building": "building the model and data", "warmup": "warming up (compiling the step)",
          "timing": "timing", "training": "training a few steps"}


def phase_text(phase: str, engine: str) -> str:
    """The child's phase as shown; starting names the engine's framework, whose import
    is what the first seconds go to."""
    if phase == "starting":
        return f"starting {FRAMEWORK[Engine(engine)]}"
    return PHASES.get(phase, phase)
