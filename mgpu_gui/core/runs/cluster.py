"""A multi-worker cluster: its spec, TF_CONFIG, the settings every worker must share.

TensorFlow-free: the CLI checks a cluster here before any process starts, and
the worker turns it into TF_CONFIG before TensorFlow is imported. Training
across machines runs on TensorFlow's own engine (MultiWorkerMirroredStrategy,
see multiworker.py); nothing here talks to another machine.

A cluster is the list of every worker's `host:port` (the same list, in the same
order, on every machine) and this machine's index in it; worker 0 is the chief,
which writes the run's checkpoints, history and export.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.config import DEMO, DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import RunStatus
from mgpu_gui.core.runs.checkpoints import write_text_atomically
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import is_live

DEFAULT_START_TIMEOUT_S = 120.0  # every worker must have joined by then
DEFAULT_PEER_TIMEOUT_S = 30.0  # a worker silent this long is taken for dead
JOB = "worker"
# Per-machine settings: they may differ between workers without changing the run.
PER_MACHINE = ("output_dir", "run_name", "devices", "batch_event_interval_s", "tensorboard")
FILE_SETTINGS = ("model", "data", "validation_data", "custom_objects")
HASH_BYTES_WHOLE = 256 << 20  # larger files are fingerprinted by size, head and tail
_TASK = re.compile(r"/job:\w+/(?:replica:\d+/)?task:(\d+)")


class ClusterError(UserError):
    """The cluster cannot form or broke apart; the message names the worker and what to do."""


@dataclass(frozen=True)
class ClusterSpec:
    """Every worker's address, this machine's index, and the timeouts of the run."""

    workers: tuple[str, ...]
    index: int
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S

    @classmethod
    def parse(cls, hosts: str, index: int, *, start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
              peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S) -> ClusterSpec:
        """From `--cluster host:port,host:port --index I`; ClusterError says what is wrong."""
        workers = tuple(w.strip() for w in hosts.split(",") if w.strip())
        problems = [p for w in workers if (p := _address_problem(w))]
        if problems:
            raise ClusterError(f"--cluster {hosts!r}: " + "; ".join(problems) +
                               ". Give every worker as host:port, comma separated, the chief "
                               "first, e.g. 10.0.0.1:2222,10.0.0.2:2222.")
        if len(workers) < 2:
            raise ClusterError(f"--cluster {hosts!r} names {len(workers)} worker(s); a cluster "
                               f"needs at least two. On one machine, use `mgpu-train train`.")
        repeated = sorted({w for w in workers if workers.count(w) > 1})
        if repeated:
            raise ClusterError(f"--cluster lists {', '.join(repeated)} more than once; every "
                               f"worker needs an address of its own (another port on the same "
                               f"machine is fine).")
        if not 0 <= index < len(workers):
            raise ClusterError(f"--index {index} is not a worker of the {len(workers)} in "
                               f"--cluster; give 0 (the chief) to {len(workers) - 1}, the "
                               f"position of this machine's address in the list.")
        for name, value in (("start", start_timeout_s), ("peer", peer_timeout_s)):
            if not value > 0:
                raise ClusterError(f"the {name} timeout must be positive, got {value}.")
        return cls(workers, index, float(start_timeout_s), float(peer_timeout_s))

    @property
    def is_chief(self) -> bool:
        return self.index == 0

    @property
    def address(self) -> str:
        return self.workers[self.index]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def describe(self, index: int) -> str:
        """'worker 1 (10.0.0.2:2222)'; the chief says so."""
        chief = ", the chief" if index == 0 else ""
        return f"worker {index} ({self.workers[index]}{chief})"

    def tf_config(self) -> str:
        """TF_CONFIG for this worker: TensorFlow's own description of the cluster."""
        return json.dumps({"cluster": {JOB: list(self.workers)},
                           "task": {"type": JOB, "index": self.index}})

    def named_in(self, text: str) -> list[int]:
        """The worker indices a TensorFlow message names ('/job:worker/replica:0/task:1')."""
        found = sorted({int(m) for m in _TASK.findall(text)})
        return [i for i in found if 0 <= i < len(self.workers)]

    def command_hint(self) -> str:
        return (f"mgpu-train worker --cluster {','.join(self.workers)} --index I "
                f"(the same settings on every machine)")

    # -- the run folder's cluster.json ---------------------------------------
    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterSpec:
        data = json.loads(text)
        return cls(tuple(data["workers"]), int(data["index"]),
                   float(data.get("start_timeout_s", DEFAULT_START_TIMEOUT_S)),
                   float(data.get("peer_timeout_s", DEFAULT_PEER_TIMEOUT_S)))

    def same_cluster(self, other: ClusterSpec) -> bool:
        return self.workers == other.workers and self.index == other.index


def _address_problem(address: str) -> str:
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        return f"{address!r} has no port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"{address!r} has no valid port (1-65535)"
    if any(c.isspace() for c in host):
        return f"{address!r} is not a host name"
    return ""


def check_port_free(port: int) -> None:
    """Refuse a port another program listens on, before TensorFlow's server takes it.

    TensorFlow's gRPC server binds every interface with SO_REUSEPORT, so a second
    server on a busy port could start and share the port's connections with the
    first. A plain bind (SO_REUSEADDR, which a socket still listening refuses)
    finds the port taken; sockets in TIME_WAIT from an earlier run do not count.
    """
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError, AttributeError):
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                if error.errno == errno.EADDRNOTAVAIL:
                    continue
                raise ClusterError(
                    f"Port {port} is in use on this machine ({error.strerror}), so this "
                    f"worker's TensorFlow server cannot listen there. Stop the program "
                    f"using it (`ss -ltnp 'sport = :{port}'` shows which), or give this "
                    f"worker another port in --cluster, on every machine.") from error


# -- the settings every worker must share ----------------------------------------
def shared_settings(config: RunConfig, replicas_per_worker: int) -> dict[str, str]:
    """A digest per setting that must be equal on every worker.

    Per-machine settings (output folder, GPU choice, ...) are left out; model and
    data files count by their content, so copies at other paths agree. The
    replicas per worker count: TensorFlow needs the same number on each.
    """
    from mgpu_gui import __version__

    plain = config.to_dict()
    settings: dict[str, str] = {}
    for name, value in plain.items():
        if name in PER_MACHINE:
            continue
        if name in FILE_SETTINGS and value not in (None, DEMO):
            value = _content_digest(Path(os.path.expanduser(str(value))))
        settings[name] = _digest(json.dumps(value, sort_keys=True))
    settings["replicas per worker"] = _digest(str(replicas_per_worker))
    settings["mgpu-gui version"] = _digest(__version__)
    return settings


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _content_digest(path: Path) -> str:
    """The content of a file, or of a folder's files (names and sizes, for image folders)."""
    h = hashlib.sha256()
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f"{file.relative_to(path)}\0{file.stat().st_size}\n".encode())
        return h.hexdigest()
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size <= HASH_BYTES_WHOLE:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            else:
                h.update(f.read(1 << 24))
                f.seek(-(1 << 24), os.SEEK_END)
                h.update(f.read())
                h.update(str(size).encode())
    except OSError as error:
        return f"unreadable: {error.strerror}"
    return h.hexdigest()


def settings_vector(settings: dict[str, str], slots: int) -> list[int]:
    """Fixed-length 16-bit pieces of the settings' digests, for a collective gather.

    Small integers travel exactly as float32 on any device; each setting keeps
    48 bits of its digest. The names come in sorted order on every worker.
    """
    values: list[int] = []
    for name in sorted(settings)[:slots]:
        digest = int(settings[name][:12], 16)
        values += [(digest >> shift) & 0xFFFF for shift in (32, 16, 0)]
    return values + [0] * (3 * slots - len(values))


def differing_settings(settings: dict[str, str], mine: list[int], theirs: list[int]) -> list[str]:
    names = sorted(settings)
    return [names[i] if i < len(names) else f"setting {i + 1}"
            for i in range(len(mine) // 3) if mine[3 * i:3 * i + 3] != theirs[3 * i:3 * i + 3]]


# -- runs of a cluster ------------------------------------------------------------
def one_replica_per_cpu_worker(config: RunConfig, inventory: GpuInventory) -> RunConfig:
    """TensorFlow's multi-worker strategy uses one CPU device per machine."""
    devices = config.devices
    cpu = devices.kind is DeviceKind.CPU or (
        devices.kind is DeviceKind.AUTO and not devices.gpus and not inventory.gpus)
    if cpu and devices.replicas is None:
        return config.replace(devices=DeviceSelection(kind=devices.kind, replicas=1))
    return config


def write_cluster(run_dir: RunDir, spec: ClusterSpec) -> None:
    """The cluster for the run's worker process, which sets TF_CONFIG from it."""
    write_text_atomically(run_dir.cluster_json, spec.to_json())


def resumable_run(config: RunConfig, spec: ClusterSpec) -> RunDir | None:
    """The latest run of this cluster and these settings that stopped with epochs done.

    The settings compare model and data files by content, so they are digested
    last, and this run's only once: only for folders that pass the cheap checks.
    """
    root = config.output_path
    if not root.is_dir():
        return None
    wanted: dict[str, str] | None = None
    for folder in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        run_dir = RunDir(folder)
        try:
            theirs = ClusterSpec.from_json(run_dir.cluster_json.read_text())
            if not (theirs.same_cluster(spec) and run_dir.backup_epoch() > 0
                    and run_dir.final_status() not in (RunStatus.COMPLETED,
                                                       RunStatus.EARLY_STOPPED)
                    and not is_live(folder)):
                continue
            settings = shared_settings(run_dir.read_config(), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        wanted = wanted if wanted is not None else shared_settings(config, 0)
        if settings == wanted:
            return run_dir
    return None


def shared_config(config: RunConfig) -> RunConfig:
    """The settings to hand the other workers (`--config`): per-machine ones at their defaults,
    so each machine picks its own devices and output folder."""
    defaults = RunConfig()
    return config.replace(devices=DeviceSelection(), output_dir=defaults.output_dir,
                          run_name=defaults.run_name)


def worker_commands(spec: ClusterSpec, config_file: Path) -> list[str]:
    """The command each other machine runs to join this chief's cluster."""
    return [shlex.join(["mgpu-train", "worker", "--cluster", ",".join(spec.workers),
                        "--index", str(index), "--config", str(config_file),
                        "--start-timeout", f"{spec.start_timeout_s:g}",
                        "--peer-timeout", f"{spec.peer_timeout_s:g}"])
            for index in range(1, len(spec.workers))]
