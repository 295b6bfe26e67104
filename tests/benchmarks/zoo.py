"""Does every zoo model (tests/zoo/) live its whole life through the CLI, on each engine?

For each zoo model and each engine it supports, as a user would type it (subprocesses of
`mgpu-train`, `--json` where the events are read), on 2 CPU replicas, with a private run
store per model and engine (`--store`):
  train     2 epochs on the model's tiny data, every export format it lists requested;
  stop      a second run of 4 epochs, sent SIGINT (Ctrl-C) after its first epoch's end
            event: it must end "stopped" (exit 130) with that epoch kept;
  resume    `mgpu-train resume` of the stopped run: it must continue from the kept epoch
            and complete the 4;
  evaluate  `mgpu-train evaluate` of the resumed run;
  predict   `mgpu-train predict` of the train run's model.keras on raw image files
            (image models only; the others: n/a);
  export    `mgpu-train export` of the resumed run, once per format;
  reload    each export and the run's checkpoint loaded in a fresh Python process on
            the same random inputs (TensorFlow backend; on the JAX engine also the
            .keras/.h5 on JAX), the largest output difference against the model's
            tolerance.
Each cell is one of: ✓; `refused before training: <reason>` (exit 2, before any epoch:
acceptable when the reason is honest); `refused: <reason>` (a command after training
exited 2 with a limit the README states, named in the zoo entry's `known_refusals`;
any other refusal of a trained model is a failure); `n/a`; `FAILED ...: <the
message's first line>` (a defect; also any "This is a bug" or traceback on stderr). The
table is printed, then every cell that is not ✓ in full, then the total wall time. Each
command's output is kept under --out (per model and engine). Exit code 0 only if no cell
FAILED.

    nice -n 19 python tests/benchmarks/zoo.py [--engines tensorflow,jax] [--only NAME,...]
        [--out DIR] [--jobs 1] [--replicas 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mgpu_gui.core.events import (  # noqa: E402
    EpochEnd,
    Event,
    ExportNotMade,
    RunFinished,
    RunStarted,
    RunStatus,
)
from tests.zoo import BY_NAME, ENGINES, MODELS, ZooModel  # noqa: E402
from tests.zoo.commands import (  # noqa: E402
    TIMEOUT_S,
    Cell,
    judge_run,
    judge_tool,
    prepare_in_child,
    run_cli,
    train_command,
    zoo_env,
)

STAGES = ("train", "stop", "resume", "evaluate", "predict", "export", "reload")
EPOCHS, STOP_EPOCHS = 2, 4
EXPORT_NAMES = {"keras": "model.keras", "h5": "model.h5", "savedmodel": "model_savedmodel"}


RELOAD = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np
    import keras
    spec = json.loads(sys.argv[1])
    custom = {}
    if spec["custom"]:
        s = importlib.util.spec_from_file_location("zoo_custom", spec["custom"])
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
        custom = getattr(module, "custom_objects", {}) or {}
    def load(path, fmt):
        if fmt == "savedmodel":
            layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
            def call(x):
                out = layer(x)
                if isinstance(out, dict):
                    out = list(out.values())[0]
                return np.asarray(out)
            return call
        model = keras.models.load_model(path, custom_objects=custom, compile=False)
        return lambda x: np.asarray(model.predict(x, verbose=0))
    reference = keras.models.load_model(spec["checkpoint"], custom_objects=custom,
                                        compile=False)
    try:
        shape = tuple(reference.inputs[0].shape[1:])
    except AttributeError:  # a subclassed model: the shape it was built for
        shape = tuple(reference.get_build_config()["input_shape"][1:])
    x = np.random.default_rng(29).random((4, *shape)).astype("float32")
    expected = np.asarray(reference.predict(x, verbose=0)).astype("float64")
    result = {}
    for fmt, path in spec["exports"].items():
        try:
            got = load(path, fmt)(x).astype("float64")
            result[fmt] = {"diff": float(np.max(np.abs(got - expected))),
                           "shape": list(got.shape)}
        except Exception as error:
            result[fmt] = {"error": f"{type(error).__name__}: {error}".splitlines()[0]}
    print("RELOAD " + json.dumps(result))
""")


def reload_cell(entry: ZooModel, checkpoint: Path, exports: dict[str, Path], engine: str,
                custom: Path | None, work: Path, env: dict[str, str]) -> Cell:
    """Each export against the checkpoint in a fresh process: on TensorFlow, and on JAX
    too (not SavedModel, TensorFlow's own) for a JAX run."""
    problems = []
    backends = ["tensorflow"] + (["jax"] if engine == "jax" else [])
    worst = 0.0
    for backend in backends:
        chosen = {f: str(p) for f, p in exports.items()
                  if backend == "tensorflow" or f != "savedmodel"}
        if not chosen:
            continue
        spec = {"checkpoint": str(checkpoint), "exports": chosen,
                "custom": str(custom) if custom else None}
        proc = subprocess.run([sys.executable, "-c", RELOAD, json.dumps(spec)], cwd=work,
                              env={**env, "KERAS_BACKEND": backend}, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        (work / f"reload-{backend}.log").write_text(proc.stdout + proc.stderr)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RELOAD ")]
        if proc.returncode != 0 or not lines:
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            problems.append(f"{backend}: checkpoint not loadable: "
                            f"{tail[-1] if tail else proc.returncode}")
            continue
        for fmt, got in json.loads(lines[-1].removeprefix("RELOAD ")).items():
            if "error" in got:
                problems.append(f"{fmt} on {backend}: {got['error']}")
            elif not got["diff"] <= entry.reload_atol:
                problems.append(f"{fmt} on {backend}: outputs differ by {got['diff']:.3g} "
                                f"(> {entry.reload_atol:g})")
            else:
                worst = max(worst, got["diff"])
    if problems:
        return Cell("failed", "; ".join(problems))
    return Cell("ok", f"max diff {worst:.2g}")


def run_job(entry: ZooModel, engine: str, prepared: dict, out: Path, replicas: int
            ) -> tuple[dict[str, Cell], float]:
    """One model on one engine, stage after stage; later stages use what earlier made."""
    started = time.monotonic()
    work = out / engine / entry.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    store = work / "store.sqlite"
    env = zoo_env(store)
    model = prepared["model"]
    custom = entry.custom_objects_path or (Path(model) if model.endswith(".py") else None)
    base = train_command(entry, prepared, work, engine, replicas)
    cells: dict[str, Cell] = {}

    train = run_cli([*base, "--epochs", str(EPOCHS), "--name", "train",
                     "--export", ",".join(entry.exports)], work / "train", env)
    cells["train"] = judge_run(train)
    if cells["train"].kind == "failed" and train.rc == 3:
        cells["train"].text = "exit 3: " + "; ".join(
            f"{e.format}: {e.message.splitlines()[0]}" for e in train.of(ExportNotMade))
    train_dir = Path(train.of(RunStarted)[0].run_dir) if train.of(RunStarted) else None

    stopped_after: list[int] = []

    def interrupt(event: Event, proc: subprocess.Popen) -> None:
        if isinstance(event, EpochEnd) and not stopped_after:
            stopped_after.append(event.epoch)
            proc.send_signal(signal.SIGINT)  # as Ctrl-C does

    stop = run_cli([*base, "--epochs", str(STOP_EPOCHS), "--name", "stop", "--export", "none"],
                   work / "stop", env, on_event=interrupt)
    cells["stop"] = judge_run(stop, expect=130)
    finished = stop.of(RunFinished)
    if cells["stop"].kind == "ok" and not (finished and finished[-1].status == RunStatus.STOPPED):
        cells["stop"] = Cell("failed", f"exit 130 but the run ended "
                             f"{finished[-1].status if finished else 'without a word'}")
    if cells["stop"].kind == "failed" and stop.rc == 0:
        cells["stop"].text = "did not stop: Ctrl-C after epoch 1, the run completed"
    stop_dir = Path(stop.of(RunStarted)[0].run_dir) if stop.of(RunStarted) else None

    if cells["stop"].kind == "ok" and stop_dir is not None:
        resume = run_cli(["--store", str(store), "resume", str(stop_dir), "--json"],
                         work / "resume", env)
        cells["resume"] = judge_run(resume)
        epochs = [e.epoch for e in resume.of(EpochEnd)]
        kept = len(stop.of(EpochEnd))
        if cells["resume"].kind == "ok" and (not epochs or epochs[0] != kept
                                             or epochs[-1] != STOP_EPOCHS - 1):
            cells["resume"] = Cell("failed", f"resumed epochs {[e + 1 for e in epochs]}, "
                                   f"expected {kept + 1}..{STOP_EPOCHS}")
        if cells["resume"].kind != "ok":  # a resume comes after training, epochs or not
            cells["resume"] = judge_tool(resume, entry, "resume")
    else:
        cells["resume"] = Cell("na", "nothing stopped")

    # The trained run the later stages use: the resumed one, else the 2-epoch one.
    target = (stop_dir if cells["resume"].kind == "ok" else
              train_dir if train_dir is not None and train.of(EpochEnd) else None)
    if target is None:
        for stage in ("evaluate", "predict", "export", "reload"):
            cells[stage] = Cell("na", "no trained run")
        return cells, time.monotonic() - started

    evaluate = run_cli(["evaluate", str(target), "--cpu", "--replicas", str(replicas),
                        "--store", str(store), "--json"], work / "evaluate", env)
    cells["evaluate"] = judge_tool(evaluate, entry, "evaluate")

    exports: dict[str, Path] = {}
    problems: list[Cell] = []
    for fmt in entry.exports:
        path = work / "exports" / EXPORT_NAMES[fmt]
        path.parent.mkdir(exist_ok=True)
        result = run_cli(["--store", str(store), "export", str(target), "-o", str(path),
                          "--format", fmt], work / f"export-{fmt}", env)
        cell = judge_tool(result, entry, "export")
        if cell.kind == "ok":
            exports[fmt] = path
        else:
            problems.append(Cell(cell.kind, f"{fmt}: {cell.text}"))
    failed = [c for c in problems if c.failed]
    cells["export"] = (Cell("ok") if not problems else
                       Cell("failed" if failed else "refused",
                            "; ".join(c.text for c in problems)))

    if entry.image and prepared.get("predict"):
        source = train_dir / "model.keras" if train_dir is not None else None
        if source is None or not source.exists():
            source = exports.get("keras")
        if source is None:
            cells["predict"] = Cell("na", "no .keras model")
        else:
            predict = run_cli(["predict", str(source), prepared["predict"], "--top", "2"],
                              work / "predict", env)
            cells["predict"] = judge_tool(predict, entry, "predict")
    else:
        cells["predict"] = Cell("na")

    checkpoint = _checkpoint(target)
    if not exports:
        cells["reload"] = Cell("na", "nothing exported")
    elif checkpoint is None:
        cells["reload"] = Cell("failed", f"{target} holds no checkpoint")
    else:
        cells["reload"] = reload_cell(entry, checkpoint, exports, engine, custom, work, env)
    return cells, time.monotonic() - started


def _checkpoint(run_dir: Path) -> Path | None:
    for name in ("checkpoints/last.keras", "checkpoints/best.keras", "model.keras"):
        if (run_dir / name).exists():
            return run_dir / name
    return None


def print_table(rows: list[tuple[str, str, dict[str, Cell], float]], width: int = 18) -> None:
    head = ["model", "engine", *STAGES, "s"]
    table = [[name, engine, *[cells[s].short() for s in STAGES], f"{seconds:.0f}"]
             for name, engine, cells, seconds in rows]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print("\nEvery cell that is not ✓, in full:")
    for name, engine, cells, _ in rows:
        for stage in STAGES:
            if cells[stage].kind not in ("ok",) and cells[stage].show() != "n/a":
                print(f"  {name} / {engine} / {stage}: {cells[stage].show()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--only", default="", help="zoo model names, comma separated")
    parser.add_argument("--out", type=Path, help="where everything goes (default: a temp dir)")
    parser.add_argument("--jobs", type=int, default=1, help="model-engine pairs at once")
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()
    started = time.monotonic()
    names = [n for n in args.only.split(",") if n] or [m.name for m in MODELS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"not in the zoo: {', '.join(unknown)}")
    engines = [e for e in args.engines.split(",") if e]
    out = (args.out or Path(tempfile.mkdtemp(prefix="mgpu-zoo-"))).absolute()
    out.mkdir(parents=True, exist_ok=True)
    print(f"Zoo: {len(names)} models on {', '.join(engines)}; files under {out}", flush=True)
    prepared = prepare_in_child(names, out / "inputs")
    jobs = [(BY_NAME[n], e) for e in engines for n in names if e in BY_NAME[n].engines]

    def one(job: tuple[ZooModel, str]) -> tuple[str, str, dict[str, Cell], float]:
        entry, engine = job
        cells, seconds = run_job(entry, engine, prepared[entry.name], out, args.replicas)
        summary = "  ".join(f"{s} {cells[s].short()}" for s in STAGES)
        print(f"[{time.monotonic() - started:6.0f} s] {entry.name} on {engine} "
              f"({seconds:.0f} s): {summary}", flush=True)
        return entry.name, engine, cells, seconds

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(one, jobs))
    (out / "results.json").write_text(json.dumps(
        [{"model": n, "engine": e, "seconds": s, "cells": {k: asdict(c) for k, c in cs.items()}}
         for n, e, cs, s in rows], indent=1))
    print()
    print_table(rows)
    failed = sum(c.failed for _, _, cells, _ in rows for c in cells.values())
    print(f"\n{len(rows)} model-engine pairs, {failed} FAILED cells; total wall time "
          f"{time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
