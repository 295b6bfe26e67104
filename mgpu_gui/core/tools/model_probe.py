"""The model probe's protocol, parent side: its command line and its result file.

The probe child (`mgpu_gui.processes.model_probe`) loads or builds a run's
model the way training does, on the CPU, and writes what it found to a JSON
file, not stdout (user code and TensorFlow print freely):

    {"ok": true, "summary": ..., "params": ..., "input_shape": [...],
     "output_units": ..., "log": [...]}
    {"ok": false, "message": ..., "error_type": ..., "traceback": ..., "log": [...]}

The GUI starts it with QProcess (`gui.jobs.model_probe`) and reads the result
here; nothing on this side imports TensorFlow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.launch import Child, module_command


def probe_command(config_path: str | os.PathLike[str],
                  result_path: str | os.PathLike[str]) -> list[str]:
    """The argv that probes the RunConfig saved at `config_path` (program first)."""
    return module_command(Child.MODEL_PROBE, str(config_path), str(result_path))


def write_result(path: Path, result: dict[str, Any]) -> None:
    """Write atomically, so a reader never sees half a result."""
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def read_result(path: Path | None, exit_code: int, output_tail: str) -> dict[str, Any]:
    """The probe's result (the file is removed), or an `ok: False` result saying the probe
    died without one (its exit code and the last lines it printed)."""
    try:
        if path is None:
            raise OSError("no result file")
        result = json.loads(path.read_text(encoding="utf-8"))
        path.unlink(missing_ok=True)
        return result
    except (OSError, ValueError):
        tail = output_tail.strip().splitlines()[-3:]
        return {"ok": False, "error_type": "ProbeCrashed",
                "message": f"The model check stopped unexpectedly (exit code {exit_code})"
                           + (": " + " / ".join(tail) if tail else ".")}
