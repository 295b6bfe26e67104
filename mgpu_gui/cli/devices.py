"""`mgpu-train devices`: the GPUs NVML sees."""

from __future__ import annotations

import argparse

from mgpu_gui.core.devices import nvml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list the GPUs NVML sees")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = nvml.query_inventory()
    print(inventory.to_json() if args.json else nvml.format_inventory(inventory))
    return 0
