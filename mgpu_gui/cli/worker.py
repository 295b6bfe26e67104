"""`mgpu-train worker`: one machine of a run across several machines.

    mgpu-train worker --cluster 10.0.0.1:2222,10.0.0.2:2222 --index 0 [train options]

Every machine runs the same command with the same settings and its own
`--index`; worker 0 is the chief. Each goes through the same supervisor and
worker process as `mgpu-train train`: the cluster travels in the run folder
(`cluster.json`) and the worker sets TF_CONFIG from it before TensorFlow starts.
The chief's run folder is a normal run (history, checkpoints, export, the run
store); the other workers train in a temporary run folder deleted at the end.

Started again after a failure, the chief continues the latest unfinished run
of the same cluster and settings in its output folder (`--new` starts afresh),
so "restart every worker with the same command" resumes the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mgpu_gui.cli.common import (
    add_store_argument,
    add_train_arguments,
    config_from_args,
    open_store_for_training,
    supervise,
)
from mgpu_gui.core.children.supervisor import prepare_resume, prepare_run
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.engines import CLUSTER_REFUSAL, Engine
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.cluster import (
    DEFAULT_PEER_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    ClusterSpec,
    check_port_free,
    one_replica_per_cpu_worker,
    resumable_run,
    write_cluster,
)
from mgpu_gui.core.runs.lock import is_live

SCRATCH_PREFIX = "mgpu-worker-"  # a non-chief's run folder: the chief's is the one kept
SCRATCH_GRACE_S = 60.0


def register(sub: argparse._SubParsersAction) -> None:
    worker = sub.add_parser(
        "worker", help="train across machines: run this on each, with the same settings",
        description="One worker of a multi-machine run (TensorFlow's "
                    "MultiWorkerMirroredStrategy). Start it on every machine with the same "
                    "--cluster and settings, each with its own --index; worker 0, the chief, "
                    "writes the run folder. TensorFlow's servers listen on every interface "
                    "without authentication: use a trusted network only.")
    worker.add_argument("--cluster", required=True, metavar="HOST:PORT,...",
                        help="every worker's host:port, the chief first; the same list on "
                             "every machine")
    worker.add_argument("--index", type=int, required=True,
                        help="this machine's position in --cluster (0: the chief)")
    worker.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT_S,
                        metavar="S", help="seconds for every worker to join (default "
                                          f"{DEFAULT_START_TIMEOUT_S:g})")
    worker.add_argument("--peer-timeout", type=float, default=DEFAULT_PEER_TIMEOUT_S,
                        metavar="S", help="a worker silent this long counts as lost and the "
                                          f"others stop (default {DEFAULT_PEER_TIMEOUT_S:g})")
    worker.add_argument("--new", action="store_true",
                        help="chief: start a new run even when an unfinished run of this "
                             "cluster and settings can be resumed")
    add_train_arguments(worker)
    add_store_argument(worker, help="the run history database (the chief's)")
    worker.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = ClusterSpec.parse(args.cluster, args.index, start_timeout_s=args.start_timeout,
                             peer_timeout_s=args.peer_timeout)
    inventory = query_inventory()
    config = one_replica_per_cpu_worker(config_from_args(args), inventory)
    if config.engine != Engine.TENSORFLOW:
        raise ConfigError([CLUSTER_REFUSAL])
    check_port_free(spec.port)  # before any folder is made; the worker checks again
    again = (f"To resume, run the same `mgpu-train worker` command on every machine again "
             f"({len(spec.workers)} workers); the chief continues after its last complete "
             f"epoch.")
    if not spec.is_chief:
        remove_stale_scratch()
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        try:
            prepared = dataclasses.replace(
                prepare_run(config.replace(output_dir=str(scratch)), inventory), temporary=True)
            write_cluster(prepared.run_dir, spec)
            return supervise(prepared, args, None, again)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    store = open_store_for_training(args)
    previous = None if args.new else resumable_run(config, spec)
    if previous is not None:
        print(f"Resuming the cluster run in {previous.path} after epoch "
              f"{previous.backup_epoch()} (--new starts a new run instead).",
              file=sys.stderr if args.json else sys.stdout)
        prepared = prepare_resume(previous.path, inventory, store)
    else:
        prepared = prepare_run(config, inventory, store)
    write_cluster(prepared.run_dir, spec)
    return supervise(prepared, args, store, again)


def remove_stale_scratch(min_age_s: float = SCRATCH_GRACE_S) -> list[Path]:
    """Remove the scratch folders of non-chief workers that could not remove their own
    (killed by SIGKILL, a power cut): none of their runs' locks is held, and they are
    older than `min_age_s` (a worker starting now has not taken its lock yet)."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            young = time.time() - folder.stat().st_mtime < min_age_s
        except OSError:
            continue
        if young or not folder.is_dir() or any(is_live(run) for run in folder.iterdir()
                                                if run.is_dir()):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed

