"""How scripts/test shares the suite among pytest-xdist's workers: the tests that need the minicluster or a
session-wide install run on one worker, one after another; every other test is a work unit of its own.

On that one worker, in collection order (tests/conftest.py puts the minicluster's first):
- every real-Slurm test: there is one minicluster, and each of its tests expects it to itself;
- then the wheel's tests: the wheel is built once for all of them, and one of them installs raysub into the
  venv with a framework's pinned Ray, which the real-Slurm tests must have seen without raysub in it.

xdist's own --dist loadgroup would do this through a mark, but it renames the tests' node ids to do so,
which pytest 9.2 no longer lets a plugin do; a scheduler that groups by path needs neither. xdist starts the
largest group first, so this one runs from the start while the other workers take everything else.

On a 2-core machine the minicluster's tests set the pace of the whole run, and they wait on deadlines, so
the workers run at a lower CPU priority (nice 10) and the one that brings up the minicluster returns to 0
first (prefer_minicluster): the other workers' bash and Python get what Ray and the tests' own commands
leave. Each slurmd starts a session of its own, so the jobs' processes already share the CPU fairly with
the whole pytest run; this keeps that run's own minicluster worker ahead of the rest of it."""

import os
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

SLURM_TESTS = "tests/slurm/"  # every test marked slurm is here (tests/conftest.py refuses one elsewhere)
ONE_WORKER = (SLURM_TESTS, "tests/unit/test_packaging.py")


# The longest start first, so that the rest fills the time around them: every minicluster test (one worker,
# one after another), then the bash property tests and the bats files, then everything else in its order.
LONGEST_FIRST = (SLURM_TESTS, "tests/unit/test_hostile_inputs.py", "tests/test_bats.py")


def start_rank(item: pytest.Item) -> int:
    """Where ``item`` goes in the suite's order (tests/conftest.py sorts by it)."""
    return next((rank for rank, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)), 99)


class OneMinicluster(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's scope scheduling: one scope for ONE_WORKER's tests, one per other test."""

    def _split_scope(self, nodeid: str) -> str:
        return "minicluster" if nodeid.startswith(ONE_WORKER) else nodeid


class Workers:
    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which would follow --dist
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> OneMinicluster:
        return OneMinicluster(config, log)


LOWER_PRIORITY = 10


def register(config: pytest.Config) -> None:
    """Schedule xdist's workers by OneMinicluster when the run has any (scripts/test's -n); in a worker,
    lower this process's CPU priority."""
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(Workers(), "raysub-workers")
    if hasattr(config, "workerinput"):
        os.nice(LOWER_PRIORITY)


def prefer_minicluster() -> None:
    """Back to the usual CPU priority before the minicluster comes up (root only, as the minicluster)."""
    if os.getpriority(os.PRIO_PROCESS, 0) > 0:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
