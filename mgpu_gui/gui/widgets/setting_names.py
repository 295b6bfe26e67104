"""Run settings by the names the window gives them, for messages and choosers.

`FIELD_NAMES` are the run setup's field labels (a problem names its field by them);
the Sweep dialog offers every sweepable setting, so `setting_label` names the ones
the form has no field label for too, and falls back to the dotted name in words.
"""

from __future__ import annotations

FIELD_NAMES = {
    "model": "Model", "allow_unsafe_code": "Allow code", "pretrained": "Pretrained",
    "data": "Data",
    "image_size": "Image size", "validation_split": "Validation split",
    "batch_per_replica": "Batch per GPU", "epochs": "Epochs", "optimizer": "Optimizer",
    "learning_rate": "Learning rate", "early_stopping.patience": "Early stopping",
    "output_dir": "Output folder", "lr_scaling.warmup_epochs": "LR warm-up",
    "precision": "Precision", "jit_compile": "XLA", "augment": "Augmentation", "cache": "Cache",
    "freeze_epochs": "Freeze", "unfreeze": "Fine-tune layers", "fine_tune_lr": "Fine-tune LR",
    "lr_scaling.enabled": "LR scaling", "on_finish": "On finish", "engine": "Engine",
    "mesh": "Mesh", "layout": "Layout rules",
}
# Where a field label names a row rather than the one setting a sweep varies.
_SETTING_NAMES = {
    "devices.replicas": "GPUs (replicas)", "devices.kind": "Device kind",
    "early_stopping.patience": "Early stopping patience",
    "early_stopping.enabled": "Early stopping", "reduce_lr.enabled": "Reduce LR on plateau",
    "jit_compile": "XLA (jit_compile)", "sync_batchnorm": "Synchronized BatchNorm",
    "override_compile": "Override the file's optimizer", "freeze_epochs": "Freeze epochs",
}


def setting_label(name: str) -> str:
    """A (dotted) RunConfig setting's name in words: "reduce_lr.factor" -> "Reduce lr:
    factor" where no label is given."""
    found = _SETTING_NAMES.get(name) or FIELD_NAMES.get(name)
    if found:
        return found
    head, _, tail = name.rpartition(".")
    words = tail.replace("_", " ")
    if head:
        return f"{head.replace('_', ' ').capitalize()}: {words}"
    return words.capitalize()
