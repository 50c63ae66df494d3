"""Ray Train (v2): report the step each ``ray.train.report`` carries, from the controller.

    from raysub.trainer_hooks.ray_train import RaysubCallback

    run_config = RunConfig(callbacks=[RaysubCallback(total=1000)])
    TorchTrainer(train_fn, scaling_config=..., run_config=run_config).fit()

The callback runs in Ray Train's controller once all workers reported, and reads rank 0's metrics: the step
under ``step_key`` (default "step"), and a throughput under ``throughput_key`` in ``unit`` when both are
given. A report without the key is passed over.
"""

from __future__ import annotations

from typing import Any

from ray.train.v2.api.callback import UserCallback

from raysub.trainer import StepReporter


class RaysubCallback(UserCallback):
    def __init__(
        self,
        step_key: str = "step",
        total: int | None = None,
        throughput_key: str | None = None,
        unit: str | None = None,
    ) -> None:
        self.step_key = step_key
        self.total = total
        self.throughput_key = throughput_key
        self.unit = unit
        self.reporter: StepReporter | None = None  # made in the controller, whose environment has LOG_DIR

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        first = metrics[0] if metrics else {}
        step = first.get(self.step_key)
        if not isinstance(step, int) or isinstance(step, bool):
            return
        if self.reporter is None:
            self.reporter = StepReporter("ray-train")
        rate = first.get(self.throughput_key) if self.throughput_key else None
        self.reporter.report(step, self.total, throughput=rate, unit=self.unit if rate is not None else None)
