"""Adapters that report a trainer's step to raysub (raysub.trainer) from the hooks the stacks have; each
imports only its own stack, so any one works without the others installed."""

from __future__ import annotations

import time

from raysub.trainer import StepReporter


class StepEnds:
    """A reporter for a hook called as steps end (maybe more than once a step): the time a step took is
    measured between the ends of two steps."""

    def __init__(self, source: str) -> None:
        self.reporter = StepReporter(source)
        self.last: tuple[int, float] | None = None  # (step, when it was first seen to end)
        self.took: float | None = None

    def ended(self, step: int, total: int | None) -> None:
        now = time.monotonic()
        if self.last is not None and step > self.last[0] and now > self.last[1]:
            self.took = (now - self.last[1]) / (step - self.last[0])
        if self.last is None or step != self.last[0]:
            self.last = (step, now)
        self.reporter.report(step, total, seconds_per_step=self.took)
