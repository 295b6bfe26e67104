"""The model probe, parent side: build a run's model in a child process, typed outcome out.

The probe child (`mgpu_gui.processes.model_probe`) loads or builds a run's
model the way training does, on the CPU, and ends with `ModelProbed` or
`ModelProbeFailed` on its events pipe (user code and TensorFlow print freely
on stdout and stderr, which are kept only as the tail for a crash message).
A probe that cannot start, dies or is cancelled also ends in a
`ModelProbeFailed`. The GUI runs `ModelProbeJob` in a QThread
(`gui.jobs.child_job`); nothing on this side imports TensorFlow. `prepare_run`
probes the model to resolve --mesh auto (`choose_auto_mesh`): this side lives in
`core.children` for that.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mgpu_gui.core.children.launch import Child, command_log, module_command
from mgpu_gui.core.children.runner import ChildProcesses, run_child
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed, parse_event
from mgpu_gui.core.mesh.layout import VariableInfo, parse_rules
from mgpu_gui.core.mesh.memory import fit_refusal, plan_memory, smallest_gpu
from mgpu_gui.core.mesh.settings import is_auto
from mgpu_gui.core.plain import from_plain
from mgpu_gui.core.sizes import format_bytes

ProbeOutcome = ModelProbed | ModelProbeFailed
PROBE_ENV = {"CUDA_VISIBLE_DEVICES": ""}  # the probe must never take GPU memory


def probe_command(events_fd: int) -> list[str]:
    """The argv of a probe that reads its RunConfig on stdin (program first)."""
    return module_command(Child.MODEL_PROBE, "--events-fd", str(events_fd))


class ModelProbeJob:
    """One probe child, run to its end; `cancel()` (any thread) kills it."""

    def __init__(self, config: RunConfig):
        self.config = config
        self._children = ChildProcesses("model-probe-output", command_log("model-check"))

    def cancel(self) -> None:
        self._children.cancel()

    def run(self) -> ProbeOutcome:
        return run_child(self._children, probe_command, self.config.to_dict(), PROBE_ENV,
                         _outcome, "The model check",
                         lambda error_type, message: ModelProbeFailed(message, error_type))


def _outcome(message: dict[str, Any]) -> ProbeOutcome | None:
    event = parse_event(json.dumps(message))
    return event if isinstance(event, ModelProbed | ModelProbeFailed) else None


def choose_auto_mesh(config: RunConfig, plan: DevicePlan) -> tuple[RunConfig, DevicePlan]:
    """--mesh auto, resolved before the run folder exists: the model probed for its
    variables and the optimizer it compiles with, the memory plan of the run's GPUs, and
    the mesh with the smallest model axis that fits (`MemoryPlan.pick`; the plan's refusal
    when none does) written into the config, so that config.json and a resume name it.
    The choice becomes the device plan's note (printed by `train`, shown by the app). Any
    other config comes back as it was."""
    if not is_auto(config.mesh):
        return config, plan
    outcome = ModelProbeJob(config).run()
    if isinstance(outcome, ModelProbeFailed):
        raise UserError(f"--mesh auto reads the model's variables, and the model could not "
                        f"be built: {outcome.message}")
    memory = plan_memory([from_plain(VariableInfo, entry) for entry in outcome.variables],
                         plan.replicas, outcome.optimizer or config.optimizer,
                         smallest_gpu(gpu.memory_total for gpu in plan.gpus),
                         parse_rules(config.layout) if config.layout else ())
    if memory.meshes and memory.smallest_fit() is None:
        raise UserError(f"--mesh auto found no mesh that fits. "
                        f"{fit_refusal(memory, memory.meshes[0].mesh, on_jax=True)}")
    chosen = memory.pick()
    whole = memory.meshes[0]
    why = ("" if chosen == whole.mesh else
           f"; data parallel would need {format_bytes(whole.total)}")
    said = (f"--mesh auto chose {chosen.flag}: {format_bytes(memory.memory(chosen).total)} "
            f"per GPU of the GPUs' {format_bytes(memory.gpu_memory)}{why} (parameters + "
            f"{memory.optimizer.name} state + gradients; activations come on top).")
    return (config.replace(mesh=chosen.flag),
            dataclasses.replace(plan, note=" ".join(filter(None, (plan.note, said)))))
