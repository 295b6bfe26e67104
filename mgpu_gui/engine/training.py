"""The training job: data, model, callbacks and `fit` under a MirroredStrategy.

Runs inside the worker process (or a test host) after the devices were set up;
it reports only through events, so it knows nothing of pipes, Qt or terminals.
Imports no TensorFlow of its own: a JAX run on the Python input pipeline
(inputs.py) trains where it is not installed. Import this module only there.

Whatever fails inside (out of memory, a NaN loss, an exception in the model's
code, a full disk) leaves as a `UserError` that says where it happened and
what to do (`failures.py`); the completed epochs' backup is always kept.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.datasets import batching, content
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.datasets.inspection import DataKind, LabelKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import ExportError, ModelError
from mgpu_gui.core.events import (
    Evaluated,
    EventSink,
    ExportNotMade,
    LogMessage,
    ModelExported,
    RunFinished,
    RunStarted,
    RunStatus,
    SetupProgress,
    SetupStep,
)
from mgpu_gui.core.lr_schedule import LinearScaling, format_lr
from mgpu_gui.core.modelfiles.card import ModelCard
from mgpu_gui.core.modelfiles.compile_facts import CompileSource
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.preflight import data_sources, loss_is_classifier
from mgpu_gui.engine import inputs, models, transfer, xla
from mgpu_gui.engine.callbacks import (
    AfterWarmup,
    AtTrainEnd,
    CommitBackup,
    CompleteEpochsOnly,
    EpochCheckpoints,
    EpochTracker,
    EventCallback,
    LinearWarmup,
    NanGuard,
    ValidateCompleteEpochs,
)
from mgpu_gui.engine.compiling import optimizer_in_use
from mgpu_gui.engine.data_source import LabelMap, PreparedData, input_record
from mgpu_gui.engine.export import export_model
from mgpu_gui.engine.failures import NonFiniteLossError, Stage, Where, explain_failure
from mgpu_gui.engine.input_wait import InputWaitMeter, TimeInputWait
from mgpu_gui.engine.legacy_compile import describe_loss
from mgpu_gui.engine.memory_check import check_memory
from mgpu_gui.engine.rehearsal import Rehearsal

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["FitLoop", "NonFiniteLossError", "TrainingSetup", "prepare", "run_training"]


@dataclass(frozen=True)
class TrainingSetup:
    """What `fit` needs, resolved and checked before the first step."""

    model: keras.Model
    train: Any  # a tf.data.Dataset, or the Python pipeline's PyDataset (inputs.py)
    val: Any | None
    test: Any | None
    data: PreparedData
    global_batch: int
    compile_source: CompileSource = CompileSource.RUN  # where the optimizer came from
    file_optimizer: str = ""  # the model file's own optimizer, when it came compiled
    callbacks: tuple[keras.callbacks.Callback, ...] = ()  # the input pipeline's, in every fit
    relabel: LabelMap | None = None  # the labels as the loss takes them (one-hot or ids)


class FitLoop:
    """How the epochs run on one machine: Keras' `fit` and `evaluate`.

    A cluster of machines runs its own loop over the same callbacks
    (multiworker.py), since `fit` fails under MultiWorkerMirroredStrategy.
    """

    chief = True  # writes the run's files; other workers write to a temporary folder
    evaluates_alone = True  # a cluster's evaluation is collective: no rehearsal of it

    def devices(self, strategy: tf.distribute.Strategy) -> list[str]:
        return list(strategy.extended.worker_devices)

    def backup_epoch(self, run_dir: RunDir) -> int:
        return run_dir.backup_epoch()

    def fit(self, model: keras.Model, setup: TrainingSetup, *, epochs: int, steps: int,
            initial_epoch: int, callbacks: list[keras.callbacks.Callback],
            tracker: EpochTracker) -> None:
        model.fit(setup.train, validation_data=setup.val, epochs=epochs, steps_per_epoch=steps,
                  initial_epoch=initial_epoch, callbacks=callbacks,
                  validation_freq=ValidateCompleteEpochs(tracker),
                  shuffle=False,  # the dataset reshuffles itself each epoch
                  verbose=0)

    def evaluate(self, model: keras.Model, dataset: Any) -> dict[str, float]:
        results = model.evaluate(dataset, verbose=0, return_dict=True)
        return {k: float(v) for k, v in results.items()}

    def finish(self) -> None:
        """After the export: nothing to wait for on one machine."""


def run_training(
    config: RunConfig,
    run_dir: RunDir,
    plan: DevicePlan,
    strategy: tf.distribute.Strategy,
    cross_device_ops: str,
    sink: EventSink,
    stop: threading.Event,
    loop: FitLoop | None = None,
    extra_callbacks: Sequence[keras.callbacks.Callback] = (),
) -> RunStatus:
    """Train one run to its end (or a stop).

    `extra_callbacks` go after the run's own in every `fit` (the worker's test-only
    fault injection is one). Failures that can be explained leave as UserErrors (see
    failures.py); any other exception is the caller's to report.
    """
    where = Where(config, run_dir, plan, strategy.num_replicas_in_sync)
    rehearsal = Rehearsal(run_dir.path)
    try:
        return _run(config, run_dir, plan, strategy, cross_device_ops, sink, stop, where,
                    loop or FitLoop(), extra_callbacks, rehearsal)
    except Exception as error:
        explained = explain_failure(error, where)
        if explained is error:
            raise
        raise explained from error
    finally:
        rehearsal.close()


def _run(config: RunConfig, run_dir: RunDir, plan: DevicePlan, strategy: tf.distribute.Strategy,
         cross_device_ops: str, sink: EventSink, stop: threading.Event, where: Where,
         loop: FitLoop, extra_callbacks: Sequence[keras.callbacks.Callback],
         rehearsal: Rehearsal) -> RunStatus:
    def log(message: str, level: str = "info") -> None:
        sink.emit(LogMessage(message=message, level=level))

    def step(now: SetupStep) -> None:
        sink.emit(SetupProgress(step=now.value))

    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    setup = prepare(config, strategy, log, run_dir.cache, step)
    model, prepared = setup.model, setup.data
    if config.freeze_epochs:  # a .py builder's backbone shows only now: refuse before starting
        transfer.find_backbone(model, config.model)
    check_memory(config, plan, model, log)  # parameters + optimizer + gradients vs the GPUs
    # A .py builder's (or the demo's) size was unknown to the preflight.
    ckpt.check_free_space(run_dir.path.parent, ckpt.space_needed(
        int(model.count_params()) * 4 * ckpt.ADAM_FACTOR, len(config.export_formats)))
    step(SetupStep.REHEARSAL)
    rehearsal.run(config, model, prepared, setup.relabel, strategy.num_replicas_in_sync,
                  evaluate=loop.evaluates_alone, exports=loop.chief, log=log)
    if loop.chief:
        run_dir.write_checkpoint_cards(ModelCard(tuple(prepared.class_names),
                                                 input_record(config, prepared)))
    replicas = strategy.num_replicas_in_sync
    steps = batching.steps(prepared.train_samples, setup.global_batch)
    dropped = batching.dropped_per_epoch(prepared.train_samples, setup.global_batch)
    initial_epoch = loop.backup_epoch(run_dir)
    optimizer, learning_rate = optimizer_in_use(model)
    sink.emit(RunStarted(
        run_dir=str(run_dir.path), device_kind=plan.kind.value,
        devices=loop.devices(strategy), device_names=list(plan.names),
        num_replicas=replicas, batch_per_replica=config.batch_per_replica,
        global_batch=setup.global_batch, train_samples=prepared.train_samples,
        val_samples=prepared.val_samples, test_samples=prepared.test_samples,
        steps_per_epoch=steps, dropped_per_epoch=dropped, epochs=config.epochs,
        initial_epoch=initial_epoch, model_name=model.name, params=int(model.count_params()),
        cross_device_ops=cross_device_ops, tf_version=_loaded_version("tensorflow"),
        keras_version=keras.__version__, summary=models.model_summary(model),
        optimizer=optimizer, learning_rate=learning_rate,
        optimizer_source=setup.compile_source.value, file_optimizer=setup.file_optimizer,
        mesh=config.mesh or ""))
    step(SetupStep.FIRST_STEP)
    if dropped:
        log(f"{dropped} of {prepared.train_samples} training samples are left out of each "
            f"epoch (the partial last batch): every replica must get a full share. "
            f"They are reshuffled, so different samples are left out each epoch.")
    if initial_epoch:
        log(f"Resuming from the backup: epochs 1-{initial_epoch} are done, "
            f"continuing with epoch {initial_epoch + 1}.")
    if stop.is_set():
        return _finish(sink, RunStatus.STOPPED, initial_epoch, None,
                       "Stopped before training began.")

    warmup = _lr_scaling(config, model, replicas, steps, log)
    use_xla = config.jit_compile and _enable_xla(model, log)
    monitor = "val_loss" if setup.val is not None else "loss"
    switch = transfer.TransferLearning(model, config, log) if config.freeze_epochs else None
    resumed_at = initial_epoch
    for stage in transfer.stages(config, resumed_at):
        if switch is not None:
            if stage.number == transfer.FINE_TUNE and stage.first_epoch == resumed_at:
                switch.restore_frozen(run_dir.backup)  # stage 1 ended in an earlier session
            sink.emit(switch.enter(stage))
        while True:
            initial_epoch = max(loop.backup_epoch(run_dir), stage.first_epoch)
            tracker = EpochTracker(steps)
            saver, events, callbacks = _callbacks(config, run_dir, sink, stop, tracker, monitor,
                                                  setup.global_batch, initial_epoch, warmup,
                                                  stage)
            stopped = _StoppedEnd(config, sink, stop, tracker, events, initial_epoch, log)
            callbacks.insert(0, rehearsal.callback())
            callbacks.extend([*setup.callbacks, *extra_callbacks, AtTrainEnd(stopped)])
            where.stage, where.steps, where.tracker, where.checkpoints = (
                Stage.TRAINING, steps, tracker, saver)
            try:
                loop.fit(model, setup, epochs=stage.end_epoch, steps=steps,
                         initial_epoch=initial_epoch, callbacks=callbacks, tracker=tracker)
            except Exception as error:
                reason = xla.compile_error(error) if use_xla else None
                if reason is None:
                    raise
                use_xla = False
                xla.disable(model)
                position = tracker.position
                made = position is not None and tracker.steps_done(position[0]) > 0
                log(f"XLA could not compile this model ({reason}). The run goes on without "
                    f"XLA (jit_compile off): epoch {initial_epoch + 1} starts again"
                    + (", keeping the steps it made" if made else "")
                    + ". Turn XLA off for this model to skip the attempt.", "warning")
                continue
            break
        ended = stopped()
        if ended is not None:
            xla.disable(model)
            return ended
    xla.disable(model)  # training is over: the test set and the export use the plain call
    epochs_done = max(events.epochs_done, initial_epoch)
    where.epochs_done = epochs_done
    if setup.test is not None:
        where.stage = Stage.EVALUATION
        _evaluate(loop, model, setup, sink, replicas)
    where.stage = Stage.EXPORT
    if loop.chief:  # other workers of a cluster: nothing to export (it reads no collective)
        _export(config, run_dir, model, prepared, sink, where)
    loop.finish()
    status = RunStatus.EARLY_STOPPED if epochs_done < config.epochs else RunStatus.COMPLETED
    return _finish(sink, status, epochs_done, events, "")


class _StoppedEnd:
    """The end of a run a stop request cut short, said once: when `fit` ends (AtTrainEnd),
    else after it returned. Returns the run's status then, None when it did not stop."""

    def __init__(self, config: RunConfig, sink: EventSink, stop: threading.Event,
                 tracker: EpochTracker, events: EventCallback, initial_epoch: int, log):
        self.config, self.sink, self.stop, self.log = config, sink, stop, log
        self.tracker, self.events, self.initial_epoch = tracker, events, initial_epoch
        self.status: RunStatus | None = None

    def __call__(self) -> RunStatus | None:
        if self.status is None and self.stop.is_set():
            self.status = self._end()
        return self.status

    def _end(self) -> RunStatus | None:
        events, tracker = self.events, self.tracker
        epochs_done = max(events.epochs_done, self.initial_epoch)
        last = events.last_epoch_seen
        if last is not None and not tracker.complete(last):
            steps, done = tracker.steps_per_epoch, tracker.steps_done(last)
            when = f"after {done} of {steps} steps" if done < steps else "during its validation"
            self.log(f"Stopped in epoch {last + 1} {when}; that epoch is not recorded"
                     + (" and will be redone on resume." if epochs_done else "."))
        elif epochs_done >= self.config.epochs:
            return None  # the stop came after the last epoch: the run goes on to its export
        return _finish(self.sink, RunStatus.STOPPED, epochs_done, events, "Stopped by request.")


def prepare(config: RunConfig, strategy: tf.distribute.Strategy, log,
            cache_dir: Path | None = None,
            step: Callable[[SetupStep], None] = lambda now: None) -> TrainingSetup:
    """Load data and model under the strategy, match labels to the loss, batch the data
    (an image folder too large for memory is cached in `cache_dir`, when given). `step`
    hears which part begins."""
    pipeline = inputs.pipeline_for(config)
    step(SetupStep.DATA)
    prepared = inputs.load(config, pipeline)
    step(SetupStep.MODEL)
    replicas = strategy.num_replicas_in_sync
    loaded = models.load_run_model(config, strategy, input_shape=prepared.input_shape,
                                   num_classes=prepared.num_classes, log=log,
                                   custom_objects_file=config.custom_objects)
    model = loaded.model
    models.check_model_fits_data(model, prepared.input_shape, prepared.num_classes,
                                 prepared.label_max if prepared.label_kind is LabelKind.SPARSE
                                 else None,
                                 prepared.class_names if prepared.kind is DataKind.IMAGES else ())
    _check_labels_for_loss(config, model)
    _check_mirrored(model, strategy, log)
    inputs.note_own_rescaling(config, model, prepared, log)
    relabel, note = models.label_mapper(models.loss_wants_onehot(model), prepared.label_kind,
                                        prepared.num_classes)
    if note:
        log(note)
    made = inputs.batches(config, prepared, pipeline, relabel, replicas, cache_dir, log)
    return TrainingSetup(
        model=model, data=prepared, global_batch=config.batch_per_replica * replicas,
        compile_source=loaded.source, file_optimizer=loaded.file_optimizer,
        train=made.train, val=made.val, test=made.test, callbacks=made.callbacks,
        relabel=relabel)


def _loaded_version(module: str) -> str:
    """The version of `module` when this process loaded it, else "" (a JAX run on the
    Python pipeline never loads TensorFlow)."""
    loaded = sys.modules.get(module)
    return str(getattr(loaded, "__version__", "")) if loaded is not None else ""


def _check_labels_for_loss(config: RunConfig, model: keras.Model) -> None:
    """Labels against the loss the model was built with: the data check before the run
    could not tell a `.py` builder's classifier (its loss is set when it runs)."""
    loss = describe_loss(getattr(model, "loss", None))
    if config.loss is None and Path(config.model).suffix == ".py" and loss_is_classifier(loss):
        content.check_built_labels(ContentRequest(
            data_sources(config), classifier=True,
            why=f"{Path(config.model).name} (loss {loss})"))


def _check_mirrored(model: keras.Model, strategy: tf.distribute.Strategy, log) -> None:
    """A variable made outside the strategy's scope trains on one replica only, silently."""
    variables = [getattr(v, "value", v) for v in model.variables]
    outside = [v.name for v in variables if not strategy.extended.variable_created_in_scope(v)]
    if outside:
        raise ModelError(
            f"{len(outside)} of the model's {len(variables)} variables were created outside the "
            f"training strategy ({', '.join(outside[:3])}); they would train on one replica "
            f"only. Build the model inside the builder function (build_model() or the one "
            "--builder names) rather than at import time of the .py.")
    describe = getattr(strategy, "describe_variables", None)  # the JAX engine's: a mesh
    log(describe(model) if describe else f"All {len(variables)} model variables are "
        f"mirrored across {strategy.num_replicas_in_sync} replicas.")


def _callbacks(config: RunConfig, run_dir: RunDir, sink: EventSink, stop: threading.Event,
               tracker: EpochTracker, monitor: str, global_batch: int, initial_epoch: int,
               warmup: LinearWarmup | None, stage: transfer.FitStage,
               ) -> tuple[EpochCheckpoints, EventCallback, list[keras.callbacks.Callback]]:
    """The run's callbacks, in order; fresh for each `fit` (an XLA fallback fits again, a
    transfer-learning run fits once per stage)."""
    # A resumed run keeps its best epoch among those the backup keeps.
    previous = run_dir.previous_best(monitor, before_epoch=initial_epoch)
    saver = EpochCheckpoints(run_dir.backup, run_dir.last_checkpoint, run_dir.best_checkpoint,
                             monitor=monitor,
                             best_so_far=previous[1] if previous is not None else None,
                             restore_after=stage.restores_after)
    input_wait = InputWaitMeter()
    events = EventCallback(
        sink, tracker, global_batch=global_batch, epochs=config.epochs, monitor=monitor,
        batch_interval_s=config.batch_event_interval_s, stop_requested=stop.is_set,
        checkpoints=saver, input_wait=input_wait,
    )
    if previous is not None:
        events.best_epoch, events.best_value = previous
    # Order matters at an epoch's end: the model file first, then the records (CSV,
    # events), and the backup's metadata last (see checkpoints.py). The warm-up sets
    # the LR before each step, after the backup restored the optimizer (train begin).
    keras_cbs = [saver, *_keras_callbacks(config, run_dir, monitor,
                                          early_stopping=stage.number != transfer.FROZEN)]
    callbacks = [NanGuard(), TimeInputWait(input_wait),
                 *[CompleteEpochsOnly(cb, tracker) for cb in keras_cbs],
                 *([warmup] if warmup is not None else []), events,
                 CompleteEpochsOnly(CommitBackup(saver), tracker)]
    return saver, events, callbacks


def _lr_scaling(config: RunConfig, model: keras.Model, replicas: int, steps: int,
                log) -> LinearWarmup | None:
    """The linear scaling rule's callback, from the optimizer's LR as built (the base)."""
    if not config.lr_scaling.enabled:
        return None
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    if isinstance(optimizer.get_config().get("learning_rate"), dict):
        log("Learning-rate scaling is off: the model's optimizer follows a learning-rate "
            "schedule of its own, which cannot be scaled.", "warning")
        return None
    # Read before the backup is restored: the base of a resumed run is the base again.
    base = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    rule = LinearScaling(base, replicas, config.lr_scaling.warmup_epochs, steps)
    warm = (f"rising linearly per step from the base LR over a warm-up of "
            f"{rule.warmup_epochs} epoch(s) ({rule.warmup_steps} steps)" if rule.warmup_epochs
            else "from the first step (no warm-up)")
    log(f"Learning rate by the linear scaling rule: base {format_lr(base)} × {rule.factor} "
        f"replica(s) = {format_lr(rule.scaled_lr)}, {warm}."
        + (" ReduceLROnPlateau watches from the first epoch after the warm-up."
           if config.reduce_lr.enabled and rule.warmup_epochs else ""))
    return LinearWarmup(rule)


def _enable_xla(model: keras.Model, log) -> bool:
    refused = xla.unsupported_layers(model)
    if refused:
        log(f"XLA is off: layer(s) {', '.join(refused[:3])} say they cannot be compiled "
            "(supports_jit = False).", "warning")
        return False
    xla.enable(model)
    log("XLA on: the model's forward and backward pass are compiled per replica "
        "(jit_compile); the first step takes longer while XLA compiles.")
    return True


def _keras_callbacks(config: RunConfig, run_dir: RunDir, monitor: str, *,
                     early_stopping: bool) -> list:
    """Keras' own per-epoch callbacks; checkpoints are ours (EpochCheckpoints). Early
    stopping watches a transfer-learning run's second stage only (`early_stopping`): its
    patience counts from the stage's start, as its callback is new in each `fit`."""
    cbs: list = [keras.callbacks.CSVLogger(str(run_dir.history_csv), append=True)]
    es, rl = config.early_stopping, config.reduce_lr
    if es.enabled and early_stopping:
        cbs.append(keras.callbacks.EarlyStopping(
            monitor=_monitor(es.monitor, monitor), patience=es.patience,
            min_delta=es.min_delta, restore_best_weights=es.restore_best_weights))
    if rl.enabled:
        reduce = keras.callbacks.ReduceLROnPlateau(
            monitor=_monitor(rl.monitor, monitor), factor=rl.factor,
            patience=rl.patience, min_lr=rl.min_lr)
        warmup = config.lr_scaling.warmup_epochs if config.lr_scaling.enabled else 0
        cbs.append(AfterWarmup(reduce, warmup) if warmup else reduce)
    if config.tensorboard:
        cbs.append(keras.callbacks.TensorBoard(str(run_dir.tensorboard), update_freq="epoch"))
    return cbs


def _monitor(wanted: str, available: str) -> str:
    """Without validation data, `val_*` monitors fall back to their training twin."""
    if available == "loss" and wanted.startswith("val_"):
        return wanted[len("val_"):]
    return wanted


def _evaluate(loop: FitLoop, model: keras.Model, setup: TrainingSetup, sink: EventSink,
              replicas: int) -> None:
    samples = setup.data.test_samples
    batch = batching.eval_batch(samples, setup.global_batch // replicas, replicas)
    results = loop.evaluate(model, setup.test)
    dropped = batching.dropped_per_epoch(samples, batch)
    sink.emit(Evaluated(dataset="test", metrics=results, samples=samples - dropped,
                        dropped=dropped))


def _export(config: RunConfig, run_dir: RunDir, model: keras.Model,
            prepared: PreparedData, sink: EventSink, where: Where) -> None:
    """Each format on its own: one whose check fails is named, and the run still completes
    with the others (a full disk still stops it: a resume exports once there is room)."""
    for fmt in config.export_formats:
        where.export_format = fmt
        try:
            result = export_model(model, run_dir.export_path(fmt), fmt,
                                  sample_x=prepared.x_sample, class_names=prepared.class_names,
                                  inputs=input_record(config, prepared),
                                  safe_mode=not config.allow_unsafe_code,
                                  custom_objects_file=config.custom_objects_source())
        except ExportError as error:
            if isinstance(error, ckpt.DiskFullError):
                raise
            sink.emit(ExportNotMade(format=fmt, message=str(error)))
            continue
        sink.emit(ModelExported(path=str(result.path), format=result.format,
                                verified=result.verified, max_abs_diff=result.max_abs_diff))


def _finish(sink: EventSink, status: RunStatus, epochs_done: int,
            events: EventCallback | None, message: str) -> RunStatus:
    best_epoch = events.best_epoch if events else None
    sink.emit(RunFinished(
        status=status, epochs_done=epochs_done, best_epoch=best_epoch,
        best_metric=events.monitor if events and best_epoch is not None else None,
        best_value=events.best_value if events and best_epoch is not None else None,
        message=message,
    ))
    return status
