"""Smoke check of a built bundle: does it really train, through its own executable?

    .venv/bin/python packaging/smoke_bundle.py [dist/mgpu-gui] [--jax]

1. Its files: both executables, the demo data, the icons, the desktop entry.
2. One CPU epoch of the demo on 2 replicas through the bundled CLI (`mgpu-train`),
   in a bare environment (PATH=/usr/bin:/bin, a temporary HOME, no venv): the run
   must complete and export a verified model.keras. The bundle's entry point
   records every process it starts (MGPU_BUNDLE_TRACE); the worker and the export
   verifier must appear there as children started through the frozen executable
   (`sys.frozen`, `sys.executable` = the bundle's `mgpu-gui`, `mgpu_gui` imported
   from inside the bundle), so no Python install took part.
3. `mgpu-train runs` lists the run as completed (the run store works frozen).
4. `mgpu-train queue add` runs a job through the frozen queue runner (a detached
   process of its own), whose worker must be its child.
5. The GUI starts (offscreen Qt) and is still up after a few seconds.
6. With --jax (a bundle built with --with-jax): step 2 again on the JAX engine.

Prints what it checked with timings; exits non-zero at the first failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EPOCH_TIMEOUT_S = 300
GUI_UP_S = 8.0
QUEUE_RUN_S = 180


class SmokeFailure(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def bare_env(home: Path, trace: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(home), "TMPDIR": str(home),
            "MGPU_GUI_STORE": str(home / "runs.sqlite3"), "MGPU_BUNDLE_TRACE": str(trace),
            "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "QT_QPA_PLATFORM": "offscreen"}


def check_files(bundle: Path) -> None:
    internal = bundle / "_internal"
    resources = internal / "mgpu_gui" / "resources"
    for path in (bundle / "mgpu-gui", bundle / "mgpu-train", resources / "demo" / "digits.npz",
                 resources / "icons" / "mgpu-gui.svg", resources / "icons" / "mgpu-gui-256.png",
                 bundle / "mgpu-gui.desktop", bundle / "install-desktop.sh"):
        check(path.exists(), f"missing from the bundle: {path}")
    check(os.access(bundle / "mgpu-gui", os.X_OK), "mgpu-gui is not executable")
    check(list(internal.glob("tensorflow/libtensorflow_cc.so*")) != [],
          "TensorFlow's library is not in the bundle")


def traced(trace: Path) -> list[dict]:
    if not trace.exists():
        return []
    return [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]


def check_training(bundle: Path, work: Path, engine: str = "tensorflow") -> Path:
    trace = work / f"trace-{engine}.jsonl"
    out = work / f"runs-{engine}"
    command = [str(bundle / "mgpu-train"), "--epochs", "1", "--cpu", "--replicas", "2",
               "--engine", engine, "-o", str(out), "--json"]
    try:
        result = subprocess.run(command, cwd=work, env=bare_env(work, trace), text=True,
                                capture_output=True, timeout=EPOCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SmokeFailure(f"one demo epoch took over {EPOCH_TIMEOUT_S} s") from None
    check(result.returncode == 0,
          f"mgpu-train exited {result.returncode}:\n{result.stderr[-3000:]}")
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    started = next((e for e in events if e["type"] == "run_started"), None)
    finished = next((e for e in events if e["type"] == "run_finished"), None)
    check(started is not None and started["num_replicas"] == 2 and started["device_kind"] == "cpu",
          f"no run on 2 CPU replicas started: {started}")
    check(engine == "tensorflow" or "DataParallel" in started["cross_device_ops"],
          f"the run did not train on the {engine} engine: {started}")
    check(finished is not None and finished["status"] == "completed"
          and finished["epochs_done"] == 1, f"the run did not complete one epoch: {finished}")
    run_dir = Path(started["run_dir"])
    model = run_dir / "model.keras"
    check(model.is_file() and model.stat().st_size > 0, f"no exported model at {model}")
    check(any(e["type"] == "model_exported" and e["verified"] for e in events),
          "the export was not verified")

    exe = str((bundle / "mgpu-gui").resolve())
    records = traced(trace)
    cli = [r for r in records if r["job"] == "mgpu_gui.cli.main"]
    workers = [r for r in records if r["job"] == "mgpu_gui.processes.training_worker"]
    verifiers = [r for r in records if r["job"] == "mgpu_gui.processes.export_verifier"]
    check(len(cli) == 1 and len(workers) == 1 and verifiers,
          f"expected the CLI, one worker and an export verifier in the trace: {records}")
    for record in records:
        check(record["frozen"] and record["executable"] == exe,
              f"a process was not the frozen bundle: {record}")
        check(Path(record["mgpu_gui"]).is_relative_to(bundle.resolve()),
              f"mgpu_gui imported from outside the bundle: {record}")
    worker = workers[0]
    check(worker["ppid"] == cli[0]["pid"], "the worker is not the CLI's child")
    check(worker["argv"][:3] == [exe, "--mgpu-module", "mgpu_gui.processes.training_worker"]
          and worker["argv"][3] == str(run_dir),
          f"the worker was not started through the frozen executable: {worker['argv']}")
    check(verifiers[0]["ppid"] == worker["pid"], "the export verifier is not the worker's child")
    return run_dir


def check_run_store(bundle: Path, work: Path, run_dir: Path) -> None:
    result = subprocess.run([str(bundle / "mgpu-train"), "runs", "--json"], cwd=work, text=True,
                            env=bare_env(work, work / "trace-runs.jsonl"), capture_output=True,
                            timeout=60)
    check(result.returncode == 0, f"mgpu-train runs failed:\n{result.stderr[-2000:]}")
    runs = json.loads(result.stdout)
    check([(r["status"], r["run_dir"]) for r in runs] == [("completed", str(run_dir))],
          f"the run store does not list the run as completed: {runs}")


def check_queue(bundle: Path, work: Path) -> None:
    """A queued job runs through the frozen queue runner, a session of its own."""
    trace = work / "trace-queue.jsonl"
    env = bare_env(work, trace)
    train = str(bundle / "mgpu-train")
    added = subprocess.run([train, "queue", "add", "--epochs", "1", "--cpu", "--replicas", "1",
                            "--name", "queued", "-o", str(work / "queued"), "--json"],
                           cwd=work, env=env, text=True, capture_output=True, timeout=60)
    check(added.returncode == 0, f"mgpu-train queue add failed:\n{added.stderr[-2000:]}")
    job = json.loads(added.stdout)["id"]
    deadline = time.monotonic() + QUEUE_RUN_S
    status = ""
    while time.monotonic() < deadline:
        listed = subprocess.run([train, "queue", "list", "--all", "--json"], cwd=work, env=env,
                                text=True, capture_output=True, timeout=60)
        status = next((j["status"] for j in json.loads(listed.stdout) if j["id"] == job), "")
        if status.endswith("completed") or "failed" in status:
            break
        time.sleep(1)
    check(status.endswith("completed"), f"the queued job did not complete: {status!r}")
    records = traced(trace)
    runners = [r for r in records if r["job"] == "mgpu_gui.processes.queue_runner"]
    workers = [r for r in records if r["job"] == "mgpu_gui.processes.training_worker"]
    check(len(runners) == 1 and [w["ppid"] for w in workers] == [runners[0]["pid"]],
          f"expected the frozen queue runner and its worker in the trace: {records}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(runners[0]["pid"], signal.SIGTERM)  # else it exits when idle


def check_gui(bundle: Path, work: Path) -> None:
    log = work / "gui.log"
    with open(log, "w") as output:
        gui = subprocess.Popen([str(bundle / "mgpu-gui")], cwd=work, stdout=output,
                               stderr=subprocess.STDOUT,
                               env=bare_env(work, work / "trace-gui.jsonl"))
        try:
            deadline = time.monotonic() + GUI_UP_S
            while time.monotonic() < deadline and gui.poll() is None:
                time.sleep(0.2)
            check(gui.poll() is None,
                  f"the GUI exited ({gui.returncode}) at start:\n{log.read_text()[-2000:]}")
        finally:
            gui.terminate()
            try:
                gui.wait(10)
            except subprocess.TimeoutExpired:
                gui.kill()
                gui.wait()
    text = log.read_text()
    check("Traceback" not in text, f"the GUI printed a traceback:\n{text[-2000:]}")
    check([r["job"] for r in traced(work / "trace-gui.jsonl")] == ["mgpu_gui.gui.app"],
          "the GUI did not start through the bundle's entry point")


def main(argv: list[str]) -> int:
    with_jax = "--jax" in argv  # a bundle built with --with-jax trains on JAX too
    paths = [a for a in argv if a != "--jax"]
    bundle = Path(paths[0] if paths else "dist/mgpu-gui").absolute()
    steps = [("files", lambda work: check_files(bundle))]
    run_dir: list[Path] = []
    steps += [
        ("one CPU epoch of the demo through the frozen worker",
         lambda work: run_dir.append(check_training(bundle, work))),
        ("the run store", lambda work: check_run_store(bundle, work, run_dir[0])),
        ("a queued job through the frozen queue runner", lambda work: check_queue(bundle, work)),
        ("the GUI starts", lambda work: check_gui(bundle, work)),
    ]
    if with_jax:
        steps.append(("one CPU epoch on the JAX engine through the frozen worker",
                      lambda work: check_training(bundle, work, "jax")))
    total = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mgpu-bundle-smoke-") as tmp:
        for name, step in steps:
            start = time.monotonic()
            try:
                step(Path(tmp))
            except SmokeFailure as failure:
                print(f"bundle smoke check FAILED ({name}): {failure}", file=sys.stderr)
                return 1
            print(f"ok   {name} ({time.monotonic() - start:.1f} s)")
    print(f"bundle smoke check passed in {time.monotonic() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
