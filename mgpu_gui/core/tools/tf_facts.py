"""Ask TensorFlow about this machine, from a child process (the parent's side).

The About dialog, "Check my setup…" and `mgpu-train doctor` run the facts
child (`mgpu_gui.processes.tf_facts`, command line from `tf_facts_command()`):
the GUI process never imports TensorFlow, and a TensorFlow that aborts while
probing CUDA takes only that child down. Its answer, one JSON object on
stdout, is read as a `doctor.TfFacts`.
"""

from __future__ import annotations

import subprocess

from mgpu_gui.core.children.launch import Child, module_command
from mgpu_gui.core.tools.doctor import TfFacts


def tf_facts_command() -> list[str]:
    """The argv that prints this machine's TensorFlow facts as JSON (program first)."""
    return module_command(Child.TF_FACTS)


def ask_tensorflow(timeout_s: float = 180.0, env: dict[str, str] | None = None) -> TfFacts:
    """Run the facts child and parse its answer (for the CLI; the GUI runs the same
    command with QProcess). Never raises for what the child does."""
    try:
        done = subprocess.run(tf_facts_command(), capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return TfFacts(error=f"the TensorFlow check did not answer within {timeout_s:.0f} s")
    except OSError as exc:
        return TfFacts(error=f"the TensorFlow check could not start: {exc}")
    return TfFacts.from_output(done.stdout, done.returncode, done.stderr)
