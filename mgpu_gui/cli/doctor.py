"""`mgpu-train doctor`: check the setup as NVML, and TensorFlow and JAX (in a child), see it."""

from __future__ import annotations

import argparse
import json
import sys

from mgpu_gui.cli.common import child_output
from mgpu_gui.core.children.runner import command_log
from mgpu_gui.core.devices import nvml
from mgpu_gui.core.tools.doctor import Facts, NvmlFacts, diagnose, exit_code
from mgpu_gui.core.tools.doctor_report import findings_to_plain, report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check the setup: driver and CUDA as TensorFlow sees them, the GPUs "
        "TensorFlow sees vs NVML, NCCL, JAX's version and devices; says what to fix (exit 1 "
        "on an error)")
    p.add_argument("--json", action="store_true", help="print the facts and findings as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mgpu_gui.core.tools.tf_facts import LOG_NAME, ask_tensorflow  # TF runs in a child

    if not args.json:
        print("Asking NVIDIA's driver, TensorFlow and JAX (they start in a child process, "
              "a few seconds)…", file=sys.stderr)
    tf = ask_tensorflow(on_output=child_output(args))
    facts = Facts(NvmlFacts.from_inventory(nvml.query_inventory()), tf)
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"facts": facts.to_dict(), "findings": findings_to_plain(findings),
                          "ok": exit_code(findings) == 0}, indent=2))
    else:
        print(report(facts, findings, verbose=args.debug))
    if tf.error and tf.installed and not args.debug:  # nothing worth reading when absent
        print(f"TensorFlow's full output is in {command_log(LOG_NAME)}", file=sys.stderr)
    return exit_code(findings)
