"""Training across machines on TensorFlow's MultiWorkerMirroredStrategy.

Runs in the worker process of each machine, after `cluster.json` told it the
cluster. Keras 3.15's `fit` fails under this strategy (TF 2.21: "Attempt to
convert a value (PerReplica...)"), so `ClusterLoop` runs the epochs itself:
`strategy.run(model.train_step)` on a distributed dataset, the metrics reduced
across every replica of every worker, and the run's usual Keras callbacks
driven through a `CallbackList`. Everything else is the one-machine job
(training.py): data, model, checkpoints, events, export.

Every decision that changes what runs next (stop now, the epoch to resume
from) is agreed with a collective, so the workers always run the same steps;
a worker that acted alone would leave the others waiting in an all-reduce.

Only the chief (worker 0) writes the run folder. The other workers run the
same saves into a temporary run folder of their own, which their CLI deletes.

TensorFlow is imported inside the functions because of the import order:
`make_cluster_strategy` (TF_CONFIG, the coordination service) comes first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.events import ClusterFormed, EventSink, LogMessage, RunStatus
from mgpu_gui.core.runs.cluster import (
    ClusterError,
    ClusterSpec,
    check_port_free,
    differing_settings,
    settings_vector,
    shared_settings,
)
from mgpu_gui.core.runs.folder import RunDir

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

    from mgpu_gui.engine.training import TrainingSetup

SETTING_SLOTS = 48  # settings compared across workers (RunConfig has about 30)
TEXT_BYTES = 1024  # each worker's device description, gathered once at the start
_HEAD = 3  # worker index, replicas on it, its backup epoch


def make_cluster_strategy(plan: DevicePlan, spec: ClusterSpec) -> tuple[Any, str]:
    """MultiWorkerMirroredStrategy for this worker, once every worker has joined.

    TensorFlow's coordination service (on the chief) is told the timeouts: the
    workers must all register within `spec.start_timeout_s`, and a worker whose
    heartbeats stop for `spec.peer_timeout_s` is reported as lost to the others,
    which then fail their current collective instead of waiting forever.
    """
    if plan.kind is DeviceKind.CPU and plan.replicas != 1:
        raise ClusterError(
            f"On CPU each worker of a cluster is one replica (TensorFlow's multi-worker "
            f"strategy uses one CPU device per machine), but {plan.replicas} were asked for. "
            f"Use --replicas 1, or GPUs.")
    check_port_free(spec.port)
    os.environ["TF_CONFIG"] = spec.tf_config()
    import tensorflow as tf

    _configure_coordination(spec)
    nccl = False
    if plan.kind is DeviceKind.GPU:
        from mgpu_gui.engine.strategy import gpus_growing_memory, nccl_available

        gpus_growing_memory(tf)
        nccl = nccl_available(tf)
    implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if nccl
                      else tf.distribute.experimental.CommunicationImplementation.RING)
    options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError,
            tf.errors.AbortedError, tf.errors.InternalError) as error:
        raise _not_formed(spec, error) from error
    local = len(strategy.extended.worker_devices)
    if plan.kind is DeviceKind.GPU and local != plan.replicas:
        raise ClusterError(f"TensorFlow sees {local} GPU(s) on this worker but {plan.replicas} "
                           f"were planned ({', '.join(plan.names)}).")
    return strategy, f"CollectiveAllReduce ({implementation.name}, {len(spec.workers)} workers)"


def _configure_coordination(spec: ClusterSpec) -> None:
    # TensorFlow's own multi-worker strategy configures the coordination service
    # with its defaults (1 hour to register) unless one is configured already.
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.configure_coordination_service(
        service_type="standalone", service_leader="/job:worker/replica:0/task:0",
        enable_health_check=True,
        cluster_register_timeout_in_ms=int(spec.start_timeout_s * 1000),
        heartbeat_timeout_in_ms=int(spec.peer_timeout_s * 1000),
        shutdown_barrier_timeout_in_ms=int(spec.peer_timeout_s * 1000),
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name="worker", num_tasks=len(spec.workers))])
    # Wait at the start until every worker registered (or the timeout), rather than
    # letting the chief go ahead into its first collective with nobody there.
    ctx.coordination_service.cluster_register_with_barrier = True


def _not_formed(spec: ClusterSpec, error: BaseException) -> ClusterError:
    missing = [i for i in spec.named_in(str(error)) if i != spec.index]
    if not spec.is_chief and not missing:
        missing = [0]  # a worker that cannot register could not reach the chief
    who = "; ".join(spec.describe(i) for i in missing) or "some workers"
    return ClusterError(
        f"The cluster did not form within {spec.start_timeout_s:g} s: {who} did not join. "
        f"Start `mgpu-train worker` on every machine (the same --cluster, each its own "
        f"--index), check that each host:port is reachable from the others (firewall, "
        f"address), then start again. TensorFlow said: {_first_line(error)}")


def _first_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(error).__name__


# -- the job ------------------------------------------------------------------------
def run_cluster_training(config: RunConfig, run_dir: RunDir, plan: DevicePlan, strategy: Any,
                         cross_device_ops: str, sink: EventSink, stop: threading.Event,
                         spec: ClusterSpec, extra_callbacks: Sequence[Any] = ()) -> RunStatus:
    """The run on this worker: agree on the settings, then train like one machine."""
    from mgpu_gui.engine.training import run_training

    agreed = threading.Event()  # set on every worker at the same step (see ClusterLoop)
    try:
        loop = ClusterLoop(strategy, spec, requested=stop, agreed=agreed)
        workers = loop.join(config, run_dir, plan)
        sink.emit(ClusterFormed(workers=workers, this_worker=spec.index))
        sink.emit(LogMessage(message=_cluster_text(workers, spec)))
        names = [f"worker {w['index']}: {name}" for w in workers for name in w["devices"]]
        everywhere = dataclasses.replace(plan, replicas=strategy.num_replicas_in_sync,
                                         names=names)
        return run_training(config, run_dir, everywhere, strategy, cross_device_ops, sink,
                            agreed, loop, extra_callbacks)
    except Exception as error:
        lost = lost_worker(error, spec, run_dir)
        if lost is None:
            raise
        raise lost from error


def _cluster_text(workers: list[dict[str, Any]], spec: ClusterSpec) -> str:
    lines = [f"Cluster of {len(workers)} workers (TensorFlow MultiWorkerMirroredStrategy; "
             f"a worker silent for {spec.peer_timeout_s:g} s counts as lost):"]
    for w in workers:
        lines.append(f"  {spec.describe(w['index'])} on {w['host']}: "
                     + "; ".join(w["devices"]))
    return "\n".join(lines)


_CLUSTER_ERRORS = ("UnavailableError", "DeadlineExceededError", "AbortedError",
                   "CancelledError", "InternalError", "FailedPreconditionError")
_CLUSTER_WORDS = ("heartbeat", "unhealthy", "collective", "coordination", "task:", "peer")


def lost_worker(error: BaseException, spec: ClusterSpec, run_dir: RunDir) -> ClusterError | None:
    """A ClusterError naming the lost worker, when `error` (or its cause) is TensorFlow
    reporting that the cluster broke apart; else None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ClusterError):
            return current
        text = str(current)
        if type(current).__name__ in _CLUSTER_ERRORS and any(w in text for w in _CLUSTER_WORDS):
            return ClusterError(_lost_message(spec, run_dir, current))
        current = current.__cause__ or current.__context__
    return None


def _lost_message(spec: ClusterSpec, run_dir: RunDir, error: BaseException) -> str:
    others = [i for i in spec.named_in(str(error)) if i != spec.index]
    who = "; ".join(spec.describe(i) for i in others) if others else "another worker"
    if spec.is_chief:
        done = run_dir.backup_epoch()
        kept = (f"The backup in {run_dir.path} keeps {done} completed epoch(s); "
                if done else "No epoch had completed; ")
    else:
        kept = "The chief's run folder keeps the completed epochs; "
    return (f"Lost {who}: it stopped answering TensorFlow's heartbeats (a crash, a kill, or "
            f"the network), so this worker ({spec.address}) stopped too. {kept}restart every "
            f"worker with the same command ({spec.command_hint()}) and the run resumes after "
            f"the last completed epoch. TensorFlow said: {_first_line(error)}")


# -- the loop -------------------------------------------------------------------------
class ClusterLoop:
    """`fit` and `evaluate` as custom distributed steps; see the module's docstring."""

    evaluates_alone = False  # every worker's evaluation takes part in the collectives

    def __init__(self, strategy: Any, spec: ClusterSpec, *, requested: threading.Event,
                 agreed: threading.Event):
        self.strategy = strategy
        self.spec = spec
        self.requested = requested  # a stop asked on this machine
        self.agreed = agreed  # a stop every worker takes
        self.chief = spec.is_chief
        self.all_devices: list[str] = []
        self._train_step = None
        self._test_step = None

    # -- collectives ---------------------------------------------------------
    def _gather(self, row: np.ndarray) -> np.ndarray:
        """Every replica's `row` (float32, the same on this worker's replicas), stacked."""
        import tensorflow as tf

        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(row[None, :], tf.float32))
        return self.strategy.gather(values, axis=0).numpy()

    def _sum(self, values: list[float]) -> np.ndarray:
        """The sum over workers of one value per worker (each local replica adds 1/n)."""
        rows = self._gather(np.asarray(values, np.float32))
        return rows.sum(axis=0) / len(self.strategy.extended.worker_devices)

    def join(self, config: RunConfig, run_dir: RunDir, plan: DevicePlan) -> list[dict]:
        """One gather at the start: each worker's devices, settings and backup epoch.

        Refuses to train when the workers' settings differ, naming the settings.
        """
        local = len(self.strategy.extended.worker_devices)
        settings = shared_settings(config, local)
        mine = settings_vector(settings, SETTING_SLOTS)
        about = {"host": socket.gethostname(), "devices": list(plan.names) or [plan.kind.value],
                 "tf_devices": list(self.strategy.extended.worker_devices)}
        text = json.dumps(about).encode()
        while len(text) > TEXT_BYTES and len(about["devices"]) > 1:
            about["devices"] = about["devices"][:-1]
            text = json.dumps(about).encode()
        text = text[:TEXT_BYTES]
        row = np.zeros(_HEAD + len(mine) + TEXT_BYTES, np.float32)
        row[:_HEAD] = (self.spec.index, local, run_dir.backup_epoch() if self.chief else 0)
        row[_HEAD:_HEAD + len(mine)] = mine
        row[_HEAD + len(mine):_HEAD + len(mine) + len(text)] = np.frombuffer(text, np.uint8)
        rows = self._gather(row)
        workers: dict[int, dict] = {}
        for gathered in rows:
            index = int(gathered[0])
            if index in workers:
                continue
            raw = bytes(gathered[_HEAD + len(mine):].astype(np.uint8)).rstrip(b"\0")
            try:
                info = json.loads(raw.decode())
            except ValueError:
                info = {"host": "?", "devices": ["?"], "tf_devices": []}
            theirs = [int(v) for v in gathered[_HEAD:_HEAD + len(mine)]]
            differ = differing_settings(settings, mine, theirs)
            if differ:
                raise ClusterError(
                    f"The workers' settings differ: {self.spec.describe(index)} has another "
                    f"{', '.join(differ)} than this worker ({self.spec.describe(self.spec.index)})"
                    f". Start every worker with the same settings (flags or --config), and "
                    f"the same model and data files (their content is compared).")
            workers[index] = {"index": index, "address": self.spec.workers[index],
                              "host": info.get("host", "?"), "chief": index == 0,
                              "replicas": int(gathered[1]), "devices": info.get("devices", []),
                              "tf_devices": info.get("tf_devices", []), "state": "joined"}
        ordered = [workers[i] for i in sorted(workers)]
        self.all_devices = [d for w in ordered for d in w["tf_devices"]]
        return ordered

    # -- FitLoop's interface -------------------------------------------------
    def devices(self, strategy: Any) -> list[str]:
        return self.all_devices or list(strategy.extended.worker_devices)

    def backup_epoch(self, run_dir: RunDir) -> int:
        """The chief's backup epoch, on every worker (the others keep no backup to read)."""
        return int(round(float(self._sum([run_dir.backup_epoch() if self.chief else 0])[0])))

    def finish(self) -> None:
        """Wait for the chief's export: every worker ends (and its server goes) together."""
        self._sum([0.0])

    def fit(self, model: keras.Model, setup: TrainingSetup, *, epochs: int, steps: int,
            initial_epoch: int, callbacks: list, tracker: object) -> None:
        """`tracker` is unused: this loop skips a partial epoch's validation by itself."""
        import keras

        # A fit again (the XLA fallback, a transfer-learning stage's recompiled model with
        # other trainable weights, a new optimizer, loss and metrics) traces its steps anew.
        self._train_step = self._test_step = None
        train = self._distribute(setup.train)
        # As Keras' fit: the metrics are built from one batch of a first iterator.
        first = next(iter(train))
        model._maybe_symbolic_build(data_batch=self.strategy.experimental_local_results(first)[0])
        listed = keras.callbacks.CallbackList(callbacks, model=model, epochs=epochs,
                                              steps=steps, verbose=0)
        model.stop_training = False
        listed.on_train_begin()
        if initial_epoch:
            self._broadcast_from_chief(model)  # the chief restored its backup just now
        iterator: Any = None
        logs: dict[str, float] = {}
        for epoch in range(initial_epoch, epochs):
            model.reset_metrics()
            listed.on_epoch_begin(epoch)
            if iterator is None:  # made after the first epoch began, as in Keras' fit: the
                iterator = iter(train)  # seeded batches start at that epoch (EpochShuffle)
            for step in range(steps):
                listed.on_train_batch_begin(step)
                logs, stop_now = self._step(model, iterator)
                listed.on_train_batch_end(step, logs)
                if stop_now:
                    self.agreed.set()
                    break
            if self.agreed.is_set():
                break  # a partial epoch: nothing is recorded (CompleteEpochsOnly)
            if setup.val is not None:
                logs = {**logs, **{f"val_{k}": v for k, v in self.evaluate(
                    model, setup.val).items()}}
            listed.on_epoch_end(epoch, logs)
            if model.stop_training:  # EarlyStopping: the same logs decide it everywhere
                break
        listed.on_train_end(logs)

    def evaluate(self, model: keras.Model, dataset: tf.data.Dataset) -> dict[str, float]:
        import tensorflow as tf

        steps = int(dataset.cardinality())
        iterator = iter(self._distribute(dataset))
        if self._test_step is None:
            self._test_step = tf.function(lambda it: self._reduced(model.test_step, next(it), 0.0))
        model.reset_metrics()
        logs: dict[str, float] = {}
        for _ in range(steps):
            logs = self._unpack(self._test_step(iterator))[0]
        return logs

    # -- steps ---------------------------------------------------------------
    def _distribute(self, dataset: tf.data.Dataset) -> Any:
        import tensorflow as tf

        # Each worker reads the whole (small, in-memory) pipeline and keeps its
        # replicas' shares of every global batch: the batches stay those of one machine.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        return self.strategy.experimental_distribute_dataset(dataset.with_options(options))

    def _step(self, model: keras.Model, iterator: Any) -> tuple[dict[str, float], bool]:
        import tensorflow as tf

        if self._train_step is None:
            self._train_step = tf.function(
                lambda it, flag: self._reduced(model.train_step, next(it), flag))
        flag = tf.constant(1.0 if self.requested.is_set() else 0.0)
        return self._unpack(self._train_step(iterator, flag))

    def _reduced(self, step: Any, batch: Any, flag: Any) -> Any:
        """One step on every replica; its metrics (mean) and the stop flag (any) in one
        all-reduce, so one worker's stop request stops them all at the same step."""
        import tensorflow as tf

        names: list[str] = []

        def replica(data: Any) -> Any:
            logs = step(data)
            if not names:  # traced once per local replica
                names.extend(logs)
            values = [tf.reshape(tf.cast(logs[k], tf.float32), [-1])[:1] for k in logs]
            return tf.concat([*values, tf.reshape(tf.cast(flag, tf.float32), [1])], axis=0)

        per_replica = self.strategy.run(replica, args=(batch,))
        total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return dict(zip(names, tf.unstack(total[:-1] / self.strategy.num_replicas_in_sync),
                        strict=True)), total[-1]

    @staticmethod
    def _unpack(result: Any) -> tuple[dict[str, float], bool]:
        logs, flag = result
        return {k: float(v) for k, v in logs.items()}, float(flag) > 0

    def _broadcast_from_chief(self, model: keras.Model) -> None:
        """Give every worker the chief's weights and optimizer state (a resume)."""
        import tensorflow as tf

        seen: set[int] = set()
        variables = []
        for v in [*model.variables, *getattr(model.optimizer, "variables", [])]:
            tv = getattr(v, "value", v)
            if id(tv) not in seen and getattr(tv, "trainable", None) is not None:
                seen.add(id(tv))
                variables.append(tv)
        chief_only = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant(1.0 if ctx.replica_id_in_sync_group == 0 else 0.0))

        def replica(mask: Any) -> list:
            ctx = tf.distribute.get_replica_context()
            out = []
            for v in variables:
                wide = v.dtype if v.dtype.is_floating else tf.float64
                value = tf.cast(v, wide) * tf.cast(mask, wide)
                out.append(tf.cast(ctx.all_reduce(tf.distribute.ReduceOp.SUM, value), v.dtype))
            return out

        @tf.function
        def sync() -> None:
            reduced = self.strategy.run(replica, args=(chief_only,))
            for v, value in zip(variables, reduced, strict=True):
                self.strategy.extended.update(v, lambda var, t: var.assign(t), args=(value,))

        sync()
