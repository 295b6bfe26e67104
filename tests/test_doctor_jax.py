"""The doctor's JAX half: JAX's facts as data (diagnose is pure), in the report and the
About dialog's rows. The real gather is checked in test_doctor (one facts child)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mgpu_gui.core.tools.doctor import Facts, Severity, TfFacts, diagnose, exit_code
from mgpu_gui.core.tools.doctor_jax import JaxDevice, JaxFacts
from mgpu_gui.core.tools.doctor_report import report, version_rows

FACTS_DIR = Path(__file__).parent / "doctor_facts"
CPU_JAX = JaxFacts(installed=True, jax_version="0.10.2", jaxlib_version="0.10.2",
                   backend="cpu", devices=(JaxDevice(0, "cpu", "cpu"),))


def with_jax(name: str, jax: JaxFacts | None, **tf_changes) -> Facts:
    """A recorded situation (tests/doctor_facts) with JAX's facts replaced."""
    facts = Facts.from_dict(json.loads((FACTS_DIR / f"{name}.json").read_text()))
    return Facts(facts.nvml, dataclasses.replace(facts.tf, jax=jax, **tf_changes))


def jax_said(facts: Facts) -> list[tuple[Severity, str]]:
    return [(f.severity, f"{f.message} {f.fix}") for f in diagnose(facts) if f.topic == "jax"]


def test_no_jax_is_worth_a_line_naming_the_extra_for_this_machine():
    [(severity, cpu_text)] = jax_said(with_jax("recorded_no_driver_cpu", JaxFacts()))
    assert severity is Severity.OK
    assert "pip install 'mgpu-gui[jax]'" in cpu_text and "TensorFlow engine" in cpu_text
    [(severity, gpu_text)] = jax_said(with_jax("all_fine_two_gpus", JaxFacts()))
    assert severity is Severity.OK and "pip install 'mgpu-gui[jax-cuda]'" in gpu_text
    assert exit_code(diagnose(with_jax("all_fine_two_gpus", JaxFacts()))) == 0


def test_a_jax_that_cannot_start_is_a_warning_with_its_error_not_a_failed_check():
    broken = JaxFacts(installed=True, jax_version="0.10.2",
                      error="RuntimeError: Unable to initialize backend 'cuda': no driver",
                      messages=("CUDA backend failed to initialize: no driver.",))
    facts = with_jax("all_fine_two_gpus", broken)
    [(severity, text)] = jax_said(facts)
    assert severity is Severity.WARNING
    assert "Unable to initialize backend 'cuda': no driver" in text
    assert "JAX said: CUDA backend failed to initialize" in text
    assert "pip install --force-reinstall 'mgpu-gui[jax-cuda]'" in text
    assert exit_code(diagnose(facts)) == 0  # the TensorFlow engine still trains
    assert "could not start: RuntimeError" in report(facts, diagnose(facts))


def test_a_cuda_plugin_that_finds_no_gpu_quotes_jax():
    failing = dataclasses.replace(CPU_JAX, cuda_plugins={"jax-cuda12-plugin": "0.10.2"},
                                  messages=("CUDA backend failed to initialize: "
                                            "CUDA_ERROR_NO_DEVICE.",))
    [ok, (severity, text)] = jax_said(with_jax("all_fine_two_gpus", failing))
    assert ok[0] is Severity.OK and severity is Severity.WARNING
    assert "jax-cuda12-plugin 0.10.2" in text and "CUDA_ERROR_NO_DEVICE" in text


def test_jax_seeing_fewer_gpus_than_nvml_is_a_warning():
    one = dataclasses.replace(CPU_JAX, backend="gpu", devices=(JaxDevice(0, "gpu", "H100"),),
                              cuda_plugins={"jax-cuda12-plugin": "0.10.2"})
    assert [s for s, _ in jax_said(with_jax("all_fine_two_gpus", one))] == [
        Severity.OK, Severity.WARNING]
    assert [s for s, _ in jax_said(with_jax("recorded_no_driver_cpu", CPU_JAX))] == [
        Severity.OK]


def test_jax_is_reported_when_tensorflow_cannot_be_asked_and_skipped_when_not_asked():
    facts = with_jax("recorded_no_driver_cpu", CPU_JAX, error="TensorFlow cannot be imported")
    assert [f.topic for f in diagnose(facts)] == ["driver", "tensorflow", "jax"]
    assert "JAX 0.10.2, jaxlib 0.10.2" in report(facts, diagnose(facts))
    died = with_jax("recorded_no_driver_cpu", None, error="the TensorFlow check died")
    assert [f.topic for f in diagnose(died)] == ["driver", "tensorflow"]


def test_about_rows_name_jax():
    facts = with_jax("recorded_no_driver_cpu", CPU_JAX)
    assert dict(version_rows(facts.nvml, None))["JAX"] == "asking…"
    assert dict(version_rows(facts.nvml, facts.tf))["JAX"] == "0.10.2 (cpu:0)"
    absent = with_jax("recorded_no_driver_cpu", JaxFacts()).tf
    assert dict(version_rows(facts.nvml, absent))["JAX"] == "not installed (optional)"
    assert dict(version_rows(facts.nvml, TfFacts(error="died")))["JAX"] == "unknown"
