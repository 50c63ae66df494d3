"""Log a RayGpuMonitor's readings to Weights & Biases (``pip install 'raysub[wandb]'``).

Only this module imports wandb, and only when a sink logs; raysub itself never needs it.
"""

from typing import Any

from raysub.gpu_monitor import RayGpuMonitor


class WandbSink:
    """Calls ``wandb.log(monitor.flush(), step=step)``; pass ``run`` to log to a run other than wandb.run.

    Example:
        with RayGpuMonitor(interval=10) as monitor:
            sink = WandbSink(monitor)
            for step in range(steps):
                train_step()
                sink.log(step)
    """

    def __init__(self, monitor: RayGpuMonitor, run: Any = None) -> None:
        self.monitor = monitor
        self.run = run

    def log(self, step: int | None = None) -> dict[str, float]:
        """Flushes the monitor into wandb; returns what it logged."""
        values = self.monitor.flush()
        if self.run is None:
            import wandb  # type: ignore[import-not-found]

            wandb.log(values, step=step)
        else:
            self.run.log(values, step=step)
        return values
