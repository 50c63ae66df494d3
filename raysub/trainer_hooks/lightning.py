"""PyTorch Lightning (``lightning`` 2.x, or ``pytorch_lightning``): report the global step as training
batches end.

    from raysub.trainer_hooks.lightning import RaysubCallback

    trainer = L.Trainer(max_steps=10_000, callbacks=[RaysubCallback()])

The step is the Trainer's ``global_step`` (optimizer steps over the whole run, not the epoch's batch
count the progress bar shows); its total ``max_steps``, else the stepping batches Lightning estimates when
finite. Reported from global rank zero only; the time a step took is measured between steps.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    from pytorch_lightning import Callback  # type: ignore[assignment, unused-ignore]

from raysub.trainer_hooks import StepEnds


def total_steps(trainer: Any) -> int | None:
    """The run's optimizer steps, as the Trainer knows them; None when it does not."""
    if trainer.max_steps and trainer.max_steps > 0:
        return int(trainer.max_steps)
    try:
        estimated = trainer.estimated_stepping_batches
    except (AttributeError, RuntimeError, ValueError):  # no data loader to count yet
        return None
    return int(estimated) if isinstance(estimated, (int, float)) and math.isfinite(estimated) else None


class RaysubCallback(Callback):
    def __init__(self) -> None:
        self.steps: StepEnds | None = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.is_global_zero:
            return
        if self.steps is None:
            self.steps = StepEnds("lightning")
        self.steps.ended(trainer.global_step, total_steps(trainer))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.steps is not None:
            self.steps.reporter.flush()
