"""RunConfig and events: JSON round trips and one message per problem."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys

import pytest

import mgpu_gui.core
from mgpu_gui.core.config import (
    DeviceKind,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    RunConfig,
)
from mgpu_gui.core.datasets.batching import dropped_per_epoch, eval_batch, steps
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.events import (
    EVENT_TYPES,
    BatchEnd,
    ChildFailure,
    EpochEnd,
    Event,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    parse_event,
)
from mgpu_gui.core.progress import Progress, format_duration, format_metrics


def test_config_round_trips_through_json():
    config = RunConfig(
        model="demo", epochs=3, metrics=("accuracy", "auc"), image_size=(32, 48),
        devices=DeviceSelection(kind=DeviceKind.GPU, gpus=("0", "GPU-abc")),
        early_stopping=EarlyStoppingConfig(enabled=True, patience=2),
        lr_scaling=LRScalingConfig(enabled=True, warmup_epochs=2), precision="mixed_float16",
        jit_compile=True, builder="create_model",
    )
    assert RunConfig.from_json(config.to_json()) == config
    # A run folder's config.json from before the speed options still loads.
    old = RunConfig.from_dict({"epochs": 3})
    assert (old.precision, old.jit_compile, old.lr_scaling.enabled) == ("float32", False, False)
    assert old.builder is None


def test_unknown_setting_is_named():
    with pytest.raises(ConfigError, match="epochz: unknown setting"):
        RunConfig.from_dict({"epochz": 3})


@pytest.mark.parametrize("changes, field, words", [
    ({"epochs": 0}, "epochs", "at least 1"),
    ({"batch_per_replica": 0}, "batch_per_replica", "at least 1"),
    ({"learning_rate": -1.0}, "learning_rate", "positive"),
    ({"validation_split": 1.0}, "validation_split", "[0, 1)"),
    ({"optimizer": "adamx"}, "optimizer", "use one of"),
    ({"model": "/nope/net.keras"}, "model", "not found"),
    ({"data": "/nope/d.npz"}, "data", "not found"),
    ({"export_formats": ("onnx",)}, "export_formats", "unknown format"),
    ({"devices": DeviceSelection(replicas=0)}, "devices.replicas", "at least 1"),
    ({"devices": DeviceSelection(kind=DeviceKind.CPU, gpus=("0",))}, "devices.gpus", "CPU"),
    ({"precision": "float8"}, "precision", "use one of float32"),
    ({"builder": "create_model"}, "builder", "only a .py model file"),
    ({"builder": "net()"}, "builder", "'net()' is not a function name"),
    ({"lr_scaling": LRScalingConfig(enabled=True, warmup_epochs=10)},
     "lr_scaling.warmup_epochs", "leaves no epoch of the 10"),
])
def test_each_problem_gets_its_own_message(changes, field, words):
    problems = dict(RunConfig(**changes).problems())
    assert field in problems and words in problems[field]


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as info:
        RunConfig(epochs=0, batch_per_replica=0).check()
    assert {f for f, _ in info.value.problems} == {"epochs", "batch_per_replica"}


def sample_events():
    return [
        RunStarted(run_dir="/r", device_kind="cpu", devices=["/cpu:0"], device_names=["CPU 0"],
                   num_replicas=2, batch_per_replica=64, global_batch=128, train_samples=1455,
                   val_samples=162, test_samples=180, steps_per_epoch=11, dropped_per_epoch=47,
                   epochs=10, initial_epoch=0, model_name="m", params=10,
                   cross_device_ops="ReductionToOneDevice", tf_version="2.21",
                   keras_version="3.15"),
        BatchEnd(epoch=0, batch=3, steps=11, metrics={"loss": 1.5}, samples_per_s=900.0),
        EpochEnd(epoch=0, epochs=10, metrics={"loss": 1.2, "val_loss": float("nan")},
                 samples_per_s=1000.0, duration_s=1.4, best=True),
        RunFinished(status=RunStatus.STOPPED, epochs_done=1),
        RunFailed(message="bad", phase=Phase.SETUP, error_type="ModelError"),
    ]


def test_events_round_trip_through_json_lines():
    for event in sample_events():
        back = parse_event(event.to_json())
        assert type(back) is type(event)
        assert back.to_json() == event.to_json()  # NaN included: compared as JSON text
    assert {type(e).type for e in sample_events()} <= set(EVENT_TYPES)



def test_every_event_type_parses_in_a_process_that_imported_nothing_else():
    """The registry is complete wherever events are parsed: a supervisor's Diagnosed once
    parsed only after core/runs/diagnosis.py happened to be imported (KeyError)."""
    code = ("import sys; from mgpu_gui.core.events import Diagnosed, parse_event; "
            "assert 'mgpu_gui.core.runs.diagnosis' not in sys.modules; "
            "e = parse_event(Diagnosed(kind='unknown', input_wait=None, utilization=None, "
            "text='x', epoch=0).to_json()); print(type(e).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "Diagnosed", done.stderr


def test_every_event_class_in_the_package_is_registered_under_its_own_type():
    for module in pkgutil.walk_packages(mgpu_gui.core.__path__, "mgpu_gui.core."):
        importlib.import_module(module.name)
    classes = set(_subclasses(Event)) - {ChildFailure}
    assert classes == set(EVENT_TYPES.values())
    assert len({cls.type for cls in classes}) == len(classes)


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]

def test_batch_arithmetic():
    assert (steps(1797, 256), dropped_per_epoch(1797, 256)) == (7, 5)
    assert eval_batch(180, 64, 2) == 90  # 180 = 2 x 90: nothing left out
    assert eval_batch(162, 64, 2) == 54
    for samples, per, replicas in [(162, 64, 4), (7, 64, 4), (1000, 32, 3)]:
        batch = eval_batch(samples, per, replicas)
        assert batch % replicas == 0 and batch <= per * replicas
        assert samples % batch < replicas


def test_progress_and_eta():
    started, batch, epoch = sample_events()[:3]
    progress = Progress()
    progress.update(started)
    progress.update(dataclasses.replace(batch, t=started.t + 4.0))
    assert progress.epoch_fraction == pytest.approx(4 / 11)
    assert progress.epoch_eta(now=started.t + 4.0) == pytest.approx(7.0)
    progress.update(dataclasses.replace(epoch, t=started.t + 11.0))
    assert progress.total_fraction == pytest.approx(0.1)
    assert progress.total_eta(now=started.t + 11.0) == pytest.approx(99.0)
    assert format_duration(99) == "1 m 39 s"
    assert format_metrics({"val_accuracy": 0.9, "loss": 0.5, "accuracy": 0.8}) == (
        "loss 0.5  acc 0.8  val_acc 0.9")


def test_startup_chatter_and_native_stacks_are_noise_and_user_output_is_not():
    from mgpu_gui.core.eventtext import is_noise

    assert is_noise("I0000 00:00:1795242273.311264 22793 port.cc:153] oneDNN custom "
                    "operations are on. You may see slightly different numerical")
    assert is_noise("WARNING: All log messages before absl::InitializeLog() is called")
    assert not is_noise("epoch 3: my custom callback says hello")
    assert not is_noise("Traceback (most recent call last):")
    # an aborting XLA: its telling line stays, the native stack under it goes
    assert not is_noise("F1125 10:02:03.1 rendezvous.cc:161] Termination timeout for all-reduce")
    assert is_noise("*** Check failure stack trace: ***")
    assert is_noise("    @     0x7f3a2c1d9e4b  absl::log_internal::LogMessageFatal()")
