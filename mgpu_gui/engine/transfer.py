"""Transfer learning as one run: the head with the backbone frozen, then fine-tuning.

`RunConfig.freeze_epochs` splits the run's epochs in two stages (`stages`):
1. the backbone (the nested model named `backbone`: a built-in's Keras
   Applications model, or one a model file builds) is frozen and the new head
   trains at the run's learning rate;
2. the backbone's top `unfreeze` layers are made trainable and the model is
   compiled again at the fine-tune learning rate, keeping the optimizer's type
   and settings, the loss and the metrics (a new optimizer: its state is for
   another set of variables).

BatchNorm layers stay frozen in both stages (the Keras transfer-learning
guide's rule): a Keras 3 BatchNormalization whose `trainable` is False runs in
inference mode whatever its caller passes, so its moving statistics, learned on
the pretrained data, are never overwritten by a few small batches. Built-ins
also call the backbone with `training=False` (engine/builtins.py).

A resume continues the stage its backup belongs to: epochs up to
`freeze_epochs` are stage 1's, later ones stage 2's, whose backup holds the
stage-2 optimizer's state and is restored into a model compiled for stage 2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

from mgpu_gui.core.config import FINE_TUNE_LR_DIVISOR, RunConfig
from mgpu_gui.core.events import StageStarted
from mgpu_gui.core.modelfiles.builtins import BACKBONE, no_backbone
from mgpu_gui.engine import precision
from mgpu_gui.engine.callbacks import restore_backup, strategy_scope
from mgpu_gui.engine.compiling import optimizer_in_use, recompile

PLAIN, FROZEN, FINE_TUNE = 0, 1, 2  # a run without stages; the two stages

Log = Callable[[str], None]


@dataclass(frozen=True)
class FitStage:
    """One `fit` of a run: epochs [first_epoch, end_epoch), 0-based."""

    number: int  # PLAIN, FROZEN or FINE_TUNE
    first_epoch: int
    end_epoch: int

    @property
    def restores_after(self) -> int:
        """Backups of epochs up to this one belong to an earlier stage: not restored by this
        stage's `fit` (their optimizer state is another stage's)."""
        return self.first_epoch if self.number == FINE_TUNE else 0


def stages(config: RunConfig, initial_epoch: int) -> list[FitStage]:
    """The fits left to run from `initial_epoch` (the backup's epoch count)."""
    total, freeze = config.epochs, config.freeze_epochs
    if not freeze:
        return [FitStage(PLAIN, initial_epoch, total)]
    found = [FitStage(FROZEN, initial_epoch, freeze)] if initial_epoch < freeze else []
    return [*found, FitStage(FINE_TUNE, freeze, total)]


def find_backbone(model: keras.Model, model_name: str) -> keras.Model:
    """The nested model named `backbone`, or a ModelError that says what to do."""
    found = next((layer for layer in model._flatten_layers(include_self=False, recursive=True)
                  if layer.name == BACKBONE and isinstance(layer, keras.Model)), None)
    if found is None:
        raise no_backbone(model_name)
    return found


class TransferLearning:
    """Switches a compiled run model between the two stages, under its strategy."""

    def __init__(self, model: keras.Model, config: RunConfig, log: Log):
        self.model, self.config, self.log = model, config, log
        self.backbone = find_backbone(model, config.model)
        self.layers = [layer for layer in self.backbone.layers
                       if not isinstance(layer, keras.layers.InputLayer)]
        self.stage_lr = optimizer_in_use(model)[1]
        base = config.learning_rate if self.stage_lr is None else self.stage_lr
        self.fine_tune_lr = (config.fine_tune_lr if config.fine_tune_lr is not None
                             else base / FINE_TUNE_LR_DIVISOR)
        if config.fine_tune_lr is None:
            log(f"fine-tune learning rate: a tenth of the first stage's ({base:.4g} / "
                f"{FINE_TUNE_LR_DIVISOR} = {self.fine_tune_lr:.4g}); set it with the fine-tune "
                "learning rate")

    def restore_frozen(self, backup: Path) -> None:
        """Stage 2 resumes from stage 1's last backup: load it into the model as stage 1
        compiled it (its optimizer state fits that one only); stage 2 then starts afresh."""
        self.backbone.trainable = False
        self._recompile(self.stage_lr)
        restore_backup(self.model, backup)

    def enter(self, stage: FitStage) -> StageStarted:
        """Make the model trainable as `stage` wants, compile it again; says so as an event."""
        unfrozen = 0
        if stage.number == FROZEN:
            self.backbone.trainable = False
            learning_rate = self.stage_lr
        else:
            count = self.config.unfreeze_layers
            unfrozen = len(self.layers) if count is None else min(count, len(self.layers))
            self.backbone.trainable = True
            top = self.layers[len(self.layers) - unfrozen:]
            for layer in self.layers:
                layer.trainable = layer in top
            for layer in self.backbone._flatten_layers(include_self=False, recursive=True):
                if isinstance(layer, keras.layers.BatchNormalization):
                    layer.trainable = False
            learning_rate = self.fine_tune_lr
        self._recompile(learning_rate)
        trainable = int(sum(np.prod(v.shape) for v in self.model.trainable_weights))
        return StageStarted(stage=stage.number, first_epoch=stage.first_epoch,
                            epochs=self.config.epochs, trainable_params=trainable,
                            learning_rate=learning_rate, unfrozen_layers=unfrozen,
                            backbone_layers=len(self.layers))

    def _recompile(self, learning_rate: float | None) -> None:
        """The same optimizer (type and settings, a fresh state), loss and metrics; the
        learning rate `learning_rate` (None: the optimizer's own schedule stays)."""
        model = self.model
        optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
        settings = optimizer.get_config()
        if learning_rate is not None:
            settings["learning_rate"] = learning_rate
        with strategy_scope(model):
            recompile(model, type(optimizer).from_config(settings))
            precision.ensure_loss_scaling(model, self.config.precision, self.log)
