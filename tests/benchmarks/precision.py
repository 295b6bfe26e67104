"""Mixed precision and XLA against float32: training samples/s of the demo model, in one run.

Variants: float32, mixed_bfloat16, mixed_float16, each without and with XLA
(jit_compile), each in a process of its own (a dtype policy is global, and the
devices are set up once per process), alternated over the repeats. A child
builds the run the way the worker does: `training.prepare` (the model through
`models.load_model`, so the policy, the float32 output and loss scaling are
the app's), `xla.enable` for the XLA variants, the same tf.data pipeline and
`fit` with an async-safe timer (engine_overhead.py's clock: epoch start to its
last step's result). The first epochs (tracing, XLA compiling) are left out;
medians over the other epochs and the repeats; printed as ratios to float32.

    python tests/benchmarks/precision.py [--device cpu|gpu] [--replicas 2] [--batch 64]
                                         [--epochs 6] [--skip 2] [--repeats 2]
                                         [--model demo] [--data demo]

On CPU the figures are for the record: mixed precision is for GPUs with tensor
cores (see precision.py); the CPU's bfloat16 flags are printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = [(p, x) for x in (False, True)
            for p in ("float32", "mixed_bfloat16", "mixed_float16")]


def label(precision: str, jit: bool) -> str:
    return precision + (" + XLA" if jit else "")


def run_child(precision: str, jit: bool, args) -> dict:
    cmd = [sys.executable, __file__, "--child", precision, "--xla" if jit else "--no-xla",
           "--device", args.device, "--replicas", str(args.replicas), "--batch",
           str(args.batch), "--epochs", str(args.epochs), "--model", args.model,
           "--data", args.data]
    done = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or ["exit code "
                                                                   f"{done.returncode}"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(args) -> None:
    from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig

    kind = DeviceKind.GPU if args.device == "gpu" else DeviceKind.CPU
    config = RunConfig(model=args.model, data=args.data, batch_per_replica=args.batch,
                       epochs=args.epochs, precision=args.child, jit_compile=args.xla,
                       devices=DeviceSelection(kind=kind, replicas=args.replicas))
    from mgpu_gui.core.devices.nvml import query_inventory
    from mgpu_gui.core.devices.plan import DevicePlan, plan_devices
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    if kind is DeviceKind.CPU:
        plan = DevicePlan(kind=kind, replicas=args.replicas, env={"CUDA_VISIBLE_DEVICES": ""})
    else:
        plan = plan_devices(config.devices, query_inventory())
    apply_device_env(plan)
    strategy, _ = make_strategy(plan)
    import keras

    from mgpu_gui.engine import xla
    from mgpu_gui.engine.training import prepare

    keras.utils.set_random_seed(config.seed)
    lines: list[str] = []
    setup = prepare(config, strategy, lambda message, level="info": lines.append(message))
    if args.xla:
        xla.enable(setup.model)
    steps = setup.data.train_samples // setup.global_batch

    from epoch_timer import EpochTimer  # beside this script

    timer = EpochTimer()
    history = setup.model.fit(setup.train, epochs=args.epochs, steps_per_epoch=steps,
                              callbacks=[timer], shuffle=False, verbose=0)
    throughput = timer.throughputs(steps * setup.global_batch)
    print(json.dumps({"throughput": throughput, "loss": history.history["loss"],
                      "global_batch": setup.global_batch, "steps": steps,
                      "devices": list(strategy.extended.worker_devices),
                      "optimizer": type(setup.model.optimizer).__name__}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--skip", type=int, default=2, help="first epochs left out")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--data", default="demo")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--xla", action=argparse.BooleanOptionalAction, default=False,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from mgpu_gui.core.devices.precision_hint import CPU_BF16_FLAGS, cpu_flags

    results: dict[tuple[str, bool], list[float]] = {v: [] for v in VARIANTS}
    errors: dict[tuple[str, bool], str] = {}
    info: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MGPU_GUI_STORE"] = str(Path(tmp) / "runs.sqlite3")
        for repeat in range(args.repeats):
            for variant in VARIANTS:
                if variant in errors:
                    continue
                started = time.monotonic()
                result = run_child(*variant, args)
                if "error" in result:
                    errors[variant] = " ".join(result["error"])
                    print(f"repeat {repeat + 1} {label(*variant)}: failed: {errors[variant]}",
                          flush=True)
                    continue
                info = result
                results[variant] += result["throughput"][args.skip:]
                print(f"repeat {repeat + 1} {label(*variant):24s} samples/s per epoch "
                      + " ".join(f"{v:.0f}" for v in result["throughput"])
                      + f"; loss {result['loss'][0]:.3f} -> {result['loss'][-1]:.3f}; "
                      f"{result['optimizer']}; {time.monotonic() - started:.0f} s", flush=True)
    flags = sorted(f for f in CPU_BF16_FLAGS if f in cpu_flags())
    print(f"\n{args.model} model on {args.data} data, {args.device.upper()} "
          f"{info.get('devices')}, global batch {info.get('global_batch')} "
          f"({args.batch} x {args.replicas}), {info.get('steps')} steps an epoch, "
          f"{args.epochs} epochs x {args.repeats} repeats, first {args.skip} left out; "
          f"CPU bfloat16 flags: {', '.join(flags) or 'none'}. Medians:")
    base = statistics.median(results[("float32", False)] or [float("nan")])
    for variant in VARIANTS:
        if variant in errors:
            print(f"  {label(*variant):24s}   failed: {errors[variant]}")
            continue
        median = statistics.median(results[variant])
        print(f"  {label(*variant):24s} {median:8.0f} samples/s  {median / base:5.2f}x float32")


if __name__ == "__main__":
    main()
