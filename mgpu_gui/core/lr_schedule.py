"""The linear learning-rate scaling rule with a warm-up, as plain arithmetic (no TensorFlow).

Goyal et al. 2017 ("Accurate, Large Minibatch SGD"): when the batch grows k
times, multiply the learning rate by k, and reach that LR by a gradual warm-up
so the first steps do not diverge. Here the reference batch is the batch per
replica, so k is the number of replicas (= global batch / batch per replica):
the base LR is the one that suits one replica's batch, e.g. what the model was
tuned with on one GPU.

The warm-up rises per step, linearly, from the base LR; the last step of the
last warm-up epoch trains at the scaled LR, so the LR an epoch ends with is
`base + (scaled - base) * (epoch + 1) / warmup_epochs` during the warm-up. After
the warm-up the schedule leaves the optimizer's LR alone: ReduceLROnPlateau
(which starts watching after the warm-up) reduces from the scaled LR, and a
resumed run keeps the LR its backup restored. The GUI uses `describe` for the
run setup; the worker's callback (`callbacks.LinearWarmup`) uses `lr_at`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearScaling:
    base_lr: float
    replicas: int
    warmup_epochs: int
    steps_per_epoch: int = 1

    @property
    def factor(self) -> int:
        return max(1, self.replicas)

    @property
    def scaled_lr(self) -> float:
        return self.base_lr * self.factor

    @property
    def warmup_steps(self) -> int:
        return max(0, self.warmup_epochs) * max(1, self.steps_per_epoch)

    def in_warmup(self, epoch: int) -> bool:
        return epoch < self.warmup_epochs

    def lr_at(self, epoch: int, step: int) -> float:
        """The LR of step `step` (0-based) of epoch `epoch` (0-based)."""
        if not self.in_warmup(epoch):
            return self.scaled_lr
        done = epoch * max(1, self.steps_per_epoch) + step + 1
        return self.base_lr + (self.scaled_lr - self.base_lr) * done / self.warmup_steps

    def lr_at_epoch_end(self, epoch: int) -> float:
        """The LR of the last step of `epoch`, as the epoch's event reports it."""
        return self.lr_at(epoch, max(1, self.steps_per_epoch) - 1)

    def describe(self) -> str:
        """'base LR 0.001 → scaled 0.002 (× 2 replicas), warm-up 5 epochs'."""
        replicas = f"{self.factor} replica{'s' if self.factor != 1 else ''}"
        warmup = ("no warm-up" if self.warmup_epochs <= 0 else
                  f"warm-up {self.warmup_epochs} epoch{'s' if self.warmup_epochs != 1 else ''}")
        return (f"base LR {format_lr(self.base_lr)} → scaled {format_lr(self.scaled_lr)} "
                f"(× {replicas}), {warmup}")


def format_lr(value: float) -> str:
    """0.001 -> '0.001', 2.5e-05 -> '2.5e-05': short, and exact enough to recognise."""
    return f"{value:.4g}"
