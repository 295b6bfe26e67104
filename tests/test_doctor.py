"""The doctor ("Check my setup"): its decisions from recorded facts, its CLI, its dialog.

`tests/doctor_facts/*.json` hold the facts of one situation each (`_about` says
where they come from): `recorded_no_driver_cpu.json` was recorded on the CI
machine; the GPU situations are that recording with the GPU side edited, since
no GPU machine was at hand. The decisions are pure functions of the facts, so
each situation is a plain table row here.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState, query_inventory
from mgpu_gui.core.tools.doctor import (
    CUDA_EXTRA,
    Facts,
    NvmlFacts,
    Severity,
    TfFacts,
    TfGpu,
    diagnose,
    exit_code,
)
from mgpu_gui.core.tools.doctor_jax import JaxDevice, JaxFacts
from mgpu_gui.core.tools.doctor_report import format_facts, report, version_rows
from tests.helpers.without_tensorflow import env_without_tensorflow

FACTS_DIR = Path(__file__).parent / "doctor_facts"
CPU_JAX = JaxFacts(installed=True, jax_version="0.10.2", jaxlib_version="0.10.2",
                   backend="cpu", devices=(JaxDevice(0, "cpu", "cpu"),))
NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).",
                      reason="No NVIDIA driver found (test)")


def load(name: str) -> Facts:
    return Facts.from_dict(json.loads((FACTS_DIR / f"{name}.json").read_text()))


def problems(findings) -> set[tuple[str, str]]:
    return {(f.severity.value, f.topic) for f in findings if f.severity is not Severity.OK}


def text_of(findings, topic: str) -> str:
    return " ".join(f"{f.message} {f.fix}" for f in findings if f.topic == topic)


# situation -> (exit code, the warnings and errors, (topic, words its findings must say))
SITUATIONS = {
    "recorded_no_driver_cpu": (0, set(), ("driver", ["CPU replicas", CUDA_EXTRA])),
    "gpus_but_no_cuda_libraries": (1, {("error", "gpus")},
                                   ("gpus", ["without its CUDA libraries", CUDA_EXTRA])),
    "tensorflow_cpu_package": (1, {("error", "gpus")},
                               ("gpus", ["CPU-only build", "pip uninstall -y tensorflow-cpu",
                                         CUDA_EXTRA])),
    "fewer_gpus_cuda_visible_devices": (0, {("warning", "gpus")},
                                        ("gpus", ["1 of the 2", "CUDA_VISIBLE_DEVICES='0'",
                                                  "env -u CUDA_VISIBLE_DEVICES"])),
    "fewer_gpus_mig": (0, {("warning", "gpus")},
                       ("gpus", ["MIG mode on", "nvidia-smi -i 0 -mig 0"])),
    "driver_too_old": (1, {("error", "cuda")},
                       ("cuda", ["too old", "CUDA 11.4", "12.5.1", "525.60.13"])),
    "driver_older_minor": (0, {("warning", "cuda")}, ("cuda", ["minor-version", "12.5"])),
    "all_fine_two_gpus": (0, set(), ("nccl", ["NCCL 2.27.7", "NcclAllReduce"])),
    "nccl_missing_two_gpus": (1, {("error", "nccl")},
                              ("nccl", ["libnccl.so.2", "nvidia-nccl-cu12", CUDA_EXTRA])),
    "driver_not_loaded": (1, {("error", "driver")}, ("driver", ["not running", "nvidia-smi"])),
    "jax_cpu_only_on_gpus": (0, {("warning", "jax")},
                             ("jax", ["CPU-only build", "pip install 'mgpu-gui[jax-cuda]'"])),
}


def test_every_recorded_situation_is_in_the_table():
    assert {p.stem for p in FACTS_DIR.glob("*.json")} == set(SITUATIONS)


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_situation(name):
    code, expected, (topic, words) = SITUATIONS[name]
    findings = diagnose(load(name))
    assert problems(findings) == expected, [f.message for f in findings]
    assert exit_code(findings) == code
    said = text_of(findings, topic)
    for word in words:
        assert word in said, (word, said)
    for finding in findings:  # every problem says what to do
        assert finding.severity is Severity.OK or finding.fix


def test_all_fine_says_everything_is_in_place():
    findings = diagnose(load("all_fine_two_gpus"))
    assert [f.topic for f in findings] == ["driver", "tensorflow", "cuda", "gpus", "nccl",
                                           "jax"]
    assert "sees all 2 GPUs" in text_of(findings, "gpus")
    assert "gpu:0 (NVIDIA H100 80GB HBM3), gpu:1" in text_of(findings, "jax")
    assert "No problems found." in report(load("all_fine_two_gpus"), findings)


def test_a_missing_cuda_extra_is_said_once_not_again_for_nccl():
    findings = diagnose(load("gpus_but_no_cuda_libraries"))
    assert not [f for f in findings if f.topic == "nccl"]


def test_an_old_driver_is_the_reason_not_an_unexplained_error():
    findings = diagnose(load("driver_too_old"))
    assert [f for f in findings if f.topic == "gpus"] == []


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_facts_round_trip_through_json(name):
    data = json.loads((FACTS_DIR / f"{name}.json").read_text())
    data.pop("_about")
    assert Facts.from_dict(data).to_dict() == data
    assert Facts.from_dict(json.loads(Facts.from_dict(data).to_json())) == Facts.from_dict(data)


# -- situations built in code ----------------------------------------------------------


def two_gpu_facts(**tf_changes) -> Facts:
    fine = load("all_fine_two_gpus")
    return Facts(fine.nvml, TfFacts(**{**fine.tf.__dict__, **tf_changes}))


def test_tensorflow_that_cannot_be_asked_is_one_error():
    facts = Facts(load("recorded_no_driver_cpu").nvml,
                  TfFacts(error="TensorFlow cannot be imported: ModuleNotFoundError"))
    findings = diagnose(facts)
    assert problems(findings) == {("error", "tensorflow")}
    assert "cannot be imported" in findings[-1].message


def no_tensorflow_facts(jax: JaxFacts | None, keras: str | None = "3.15.1") -> Facts:
    return Facts(load("recorded_no_driver_cpu").nvml,
                 TfFacts(error="TensorFlow cannot be imported: ModuleNotFoundError",
                         installed=False, keras_version=keras, jax=jax))


def test_no_tensorflow_beside_a_working_jax_is_a_warning_not_a_failed_check():
    facts = no_tensorflow_facts(CPU_JAX)
    findings = diagnose(facts)
    assert problems(findings) == {("warning", "tensorflow")}
    assert exit_code(findings) == 0
    assert "TensorFlow is not installed (Keras 3.15.1)" in text_of(findings, "tensorflow")
    assert "JAX engine" in text_of(findings, "tensorflow")
    assert "not installed; Keras 3.15.1" in format_facts(facts)
    rows = dict(version_rows(facts.nvml, facts.tf))
    assert (rows["TensorFlow"], rows["Keras"], rows["CUDA"]) == ("not installed", "3.15.1",
                                                                 "no TensorFlow")


@pytest.mark.parametrize("jax, keras", [(JaxFacts(), "3.15.1"), (CPU_JAX, None),
                                        (JaxFacts(installed=True, error="no backend"), "3.15.1")])
def test_no_tensorflow_and_no_engine_that_can_train_is_an_error(jax, keras):
    findings = diagnose(no_tensorflow_facts(jax, keras))
    assert ("error", "tensorflow") in problems(findings)
    assert "no engine can train" in text_of(findings, "tensorflow")


def test_no_nccl_kernel_falls_back_to_hierarchical_copy():
    findings = diagnose(two_gpu_facts(nccl_kernel=False))
    assert problems(findings) == {("warning", "nccl")}
    assert "HierarchicalCopyAllReduce" in text_of(findings, "nccl")


def test_gpu_older_than_the_build_is_named():
    fine = load("all_fine_two_gpus")
    old = NvmlFacts(**{**fine.nvml.__dict__, "gpus": (
        fine.nvml.gpus[0], fine.nvml.gpus[1].__class__(1, "Tesla M60", "GPU-x", (5, 2)))})
    findings = diagnose(Facts(old, TfFacts(**{**fine.tf.__dict__,
                                              "gpus": fine.tf.gpus[:1]})))
    assert problems(findings) == {("warning", "gpus")}
    assert "compute capability 5.2" in text_of(findings, "gpus")
    assert "(6.0)" in text_of(findings, "gpus")


def test_native_windows_has_no_gpu_tensorflow():
    findings = diagnose(two_gpu_facts(platform="win32", gpus=()))
    assert ("error", "gpus") in problems(findings)
    assert "WSL2" in text_of(findings, "gpus")


def test_cuda_visible_devices_hiding_all_gpus_is_a_warning_not_an_error():
    findings = diagnose(two_gpu_facts(cuda_visible_devices="", gpus=()))
    assert problems(findings) == {("warning", "gpus")}
    assert "hides every GPU" in text_of(findings, "gpus")


def test_unexplained_missing_gpus_quote_tensorflow():
    findings = diagnose(two_gpu_facts(gpus=(), messages=("Something odd about GPU 0",)))
    assert problems(findings) == {("error", "gpus")}
    assert "Something odd about GPU 0" in text_of(findings, "gpus")


def test_gpus_tensorflow_sees_but_nvml_cannot_list():
    facts = Facts(NvmlFacts.from_inventory(NO_GPU),
                  TfFacts(**{**load("all_fine_two_gpus").tf.__dict__}))
    findings = diagnose(facts)
    assert ("warning", "gpus") in problems(findings)
    assert "NVML cannot list them" in text_of(findings, "gpus")


def test_nvml_facts_come_from_the_inventory(nvml):
    facts = NvmlFacts.from_inventory(query_inventory(nvml))
    assert facts.state is NvmlState.OK
    assert facts.driver_version == "550.54.15" and facts.cuda_driver_version == "12.4"
    assert [g.uuid for g in facts.gpus] == [
        "GPU-11111111-1111-1111-1111-111111111111", "GPU-22222222-2222-2222-2222-222222222222"]
    assert facts.gpus[0].compute_capability == (9, 0)


# -- the child's answer and the texts ---------------------------------------------------------


def fake_facts_child(monkeypatch, code: str) -> None:
    """The facts child replaced by `python -c code` (its events fd is sys.argv[1])."""
    monkeypatch.setattr("mgpu_gui.core.tools.tf_facts.tf_facts_command",
                        lambda fd: [sys.executable, "-c", code, str(fd)])


def test_child_answer_is_parsed_or_explained(monkeypatch):
    from mgpu_gui.core.events import TfFactsGathered
    from mgpu_gui.core.tools.tf_facts import ask_tensorflow

    event = TfFactsGathered({"tensorflow_version": "2.21.0", "gpus": [
        {"name": "/physical_device:GPU:0", "compute_capability": [9, 0]}]})
    fake_facts_child(monkeypatch, "import os, sys; print('some print from Keras'); "
                     f"os.write(int(sys.argv[1]), {(event.to_json() + chr(10)).encode()!r})")
    parsed = ask_tensorflow()
    assert parsed.tensorflow_version == "2.21.0"
    assert parsed.gpus == (TfGpu("/physical_device:GPU:0", None, (9, 0)),)
    fake_facts_child(monkeypatch, "import os, sys; print('F tensorflow: Check failed'); "
                     "print('Aborted', flush=True); os.abort()")
    crashed = ask_tensorflow()
    assert crashed.error and "SIGABRT" in crashed.error and "Aborted" in crashed.error


def test_version_rows_ask_then_answer():
    recorded = load("recorded_no_driver_cpu")
    asking = dict(version_rows(None, None))
    assert asking["TensorFlow"] == asking["cuDNN"] == "asking TensorFlow…"
    rows = dict(version_rows(recorded.nvml, recorded.tf))
    assert rows["TensorFlow"] == "2.21.0" and rows["Keras"] == "3.15.1"
    assert rows["CUDA"] == "12.5.1 (TensorFlow's build)"
    assert rows["cuDNN"] == "9 (TensorFlow's build)"
    assert rows["NVIDIA driver"].startswith("No NVIDIA driver found")
    cpu = dict(version_rows(recorded.nvml, load("tensorflow_cpu_package").tf))
    assert cpu["CUDA"] == cpu["cuDNN"] == "not built with CUDA"
    fine = load("all_fine_two_gpus")
    assert dict(version_rows(fine.nvml, fine.tf))["NVIDIA driver"] == (
        "570.133.20 (supports CUDA 12.8)")


def test_report_lists_facts_and_what_to_do():
    facts = load("gpus_but_no_cuda_libraries")
    text = report(facts, diagnose(facts))
    assert "GPU 0: NVIDIA H100 80GB HBM3" in text
    assert "CUDA libraries (nvidia-*-cu12 wheels): none installed" in text
    assert f"→ Install the CUDA extra: {CUDA_EXTRA}" in text
    assert "1 error, 0 warnings." in text
    assert "Cannot dlopen some GPU libraries" in format_facts(facts)


# -- on this machine ----------------------------------------------------------------------


@pytest.mark.slow
def test_tensorflow_is_asked_in_a_child_on_this_machine():
    from mgpu_gui.core.tools.tf_facts import ask_tensorflow

    facts = ask_tensorflow()
    assert facts.error is None, facts.error
    assert facts.tensorflow_version == importlib.metadata.version("tensorflow")
    assert facts.keras_version == importlib.metadata.version("keras")
    assert facts.platform == sys.platform
    assert (facts.cuda_build_version is not None) == facts.built_with_cuda
    assert facts.cuda_visible_devices == ""  # conftest hides GPUs from every test
    assert facts.gpus == ()
    # JAX, asked by the same child: the dev extra installs its CPU build.
    assert facts.jax is not None and facts.jax.installed, facts.jax
    assert facts.jax.error is None and facts.jax.backend == "cpu"
    assert facts.jax.jax_version == importlib.metadata.version("jax")
    assert [d.platform for d in facts.jax.devices] == ["cpu"]


def test_cli_doctor_json_and_exit_code(monkeypatch, capsys, nvml):
    from mgpu_gui.cli import main as cli

    two_gpus = query_inventory(nvml)  # the fake NVML: 2 H100s, driver 550.54.15
    monkeypatch.setattr("mgpu_gui.core.devices.nvml.query_inventory", lambda: two_gpus)
    for name, code in (("all_fine_two_gpus", 0), ("tensorflow_cpu_package", 1)):
        monkeypatch.setattr("mgpu_gui.core.tools.tf_facts.ask_tensorflow",
                            lambda name=name, on_output=None: load(name).tf)
        assert cli.main(["doctor", "--json"]) == code
        out = json.loads(capsys.readouterr().out)
        assert out["ok"] is (code == 0)
        assert out["facts"]["tf"]["tensorflow_version"] == "2.21.0"
        assert out["facts"]["nvml"]["driver_version"] == "550.54.15"
        assert {f["severity"] for f in out["findings"]} <= {"ok", "warning", "error"}
    assert cli.main(["doctor"]) == 1  # text
    printed = capsys.readouterr().out
    assert "✗ " in printed and "→ pip uninstall -y tensorflow-cpu" in printed


@pytest.mark.slow
def test_cli_doctor_runs_for_real():
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", "doctor", "--json"],
                          capture_output=True, text=True, timeout=240)
    out = json.loads(done.stdout)
    assert done.returncode == (0 if out["ok"] else 1), done.stderr[-2000:]
    assert out["facts"]["tf"]["tensorflow_version"] == importlib.metadata.version("tensorflow")
    assert out["facts"]["nvml"]["state"] in {s.value for s in NvmlState}


@pytest.mark.slow
def test_cli_doctor_where_tensorflow_is_not_installed():
    """The JAX-only GPU machine: TensorFlow absent is said as such, and the check passes."""
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", "doctor", "--json"],
                          capture_output=True, text=True, timeout=240,
                          env=env_without_tensorflow())
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["ok"] is True
    assert out["facts"]["tf"]["installed"] is False
    assert out["facts"]["tf"]["keras_version"] == importlib.metadata.version("keras")
    assert out["facts"]["tf"]["jax"]["installed"] is True
    [said] = [f for f in out["findings"] if f["topic"] == "tensorflow"]
    assert said["severity"] == "warning"
    assert said["message"].startswith("TensorFlow is not installed"), said


# -- the dialog ---------------------------------------------------------------------------


def test_doctor_dialog_shows_findings_and_copies_the_report(qtbot, nvml):
    from PySide6.QtGui import QGuiApplication

    from mgpu_gui.gui.dialogs.doctor import DoctorDialog

    dialog = DoctorDialog(None, ask=False)
    qtbot.addWidget(dialog)
    assert "listing the GPUs" in dialog.status.text() and not dialog.copy_button.isEnabled()
    dialog.set_inventory(NO_GPU)
    dialog.set_tf_facts(load("recorded_no_driver_cpu").tf)
    assert dialog.status.text() == "<b>No problems found.</b>"
    assert "CPU replicas" in dialog.findings_view.toPlainText()
    assert "TensorFlow 2.21.0 (tensorflow)" in dialog.facts_view.toPlainText()
    dialog.set_inventory(query_inventory(nvml))  # 2 GPUs, and a CPU-only TensorFlow
    dialog.set_tf_facts(load("tensorflow_cpu_package").tf)
    assert "1 problem to fix" in dialog.status.text()
    assert "pip uninstall -y tensorflow-cpu" in dialog.findings_view.toPlainText()
    dialog.copy()
    assert QGuiApplication.clipboard().text() == dialog.report_text()
    assert "✗" in dialog.report_text()


@pytest.mark.slow
def test_check_my_setup_opens_at_once_and_asks_tensorflow_in_the_background(qtbot):
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    window.show()
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    assert window.doctor_action in help_menu.actions()
    window.doctor_action.trigger()
    dialog = window.doctor_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.probe.is_running() and dialog.busy.isVisible()
    assert "asking TensorFlow" in dialog.status.text()
    qtbot.waitUntil(lambda: dialog.tf is not None, timeout=120_000)
    assert dialog.tf.error is None, dialog.tf.error
    assert not dialog.busy.isVisible() and dialog.again_button.isEnabled()
    assert dialog.findings and "TensorFlow" in dialog.findings_view.toPlainText()
    dialog.again_button.click()  # asks anew; closing mid-way kills the child
    assert dialog.probe.is_running()
    window.close()
    assert not dialog.probe.is_running()
