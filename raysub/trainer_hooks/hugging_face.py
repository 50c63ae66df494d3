"""Hugging Face Trainer (and what runs on it: TRL, LLaMA-Factory, axolotl, unsloth): report the global step
after each optimizer step.

    from raysub.trainer_hooks.hugging_face import RaysubCallback

    trainer = Trainer(model, args, train_dataset=data, callbacks=[RaysubCallback()])

The step is the Trainer's ``state.global_step`` (optimizer steps, gradient accumulation counted once) and
its total ``state.max_steps``, reported from the main process only; the time a step took is measured
between steps.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from raysub.trainer_hooks import StepEnds


class RaysubCallback(TrainerCallback):
    def __init__(self) -> None:
        self.steps: StepEnds | None = None  # made on the main process, in the job's environment

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        if self.steps is None:
            self.steps = StepEnds("hugging-face")
        self.steps.ended(state.global_step, state.max_steps or None)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.steps is not None:
            self.steps.reporter.flush()
