"""How scripts/test shares the suite among pytest-xdist's workers: the tests that need the minicluster or a
session-wide install run on one worker, one after another; every other test is a work unit of its own.

On that one worker, in collection order (tests/conftest.py puts the minicluster's first):
- every real-Slurm test: there is one minicluster, and each of its tests expects it to itself;
- then the wheel's tests: the wheel is built once for all of them, and one of them installs raysub into the
  venv with a framework's pinned Ray, which the real-Slurm tests must have seen without raysub in it.

xdist's own --dist loadgroup would do this through a mark, but it renames the tests' node ids to do so,
which pytest 9.2 no longer lets a plugin do; a scheduler that groups by path needs neither. xdist starts the
largest group first, so this one runs from the start while the other workers take everything else."""

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

ONE_WORKER = ("tests/slurm/", "tests/unit/test_packaging.py")


class OneMinicluster(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's scope scheduling: one scope for ONE_WORKER's tests, one per other test."""

    def _split_scope(self, nodeid: str) -> str:
        return "minicluster" if nodeid.startswith(ONE_WORKER) else nodeid


class Workers:
    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which would follow --dist
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> OneMinicluster:
        return OneMinicluster(config, log)


def register(config: pytest.Config) -> None:
    """Schedule xdist's workers by OneMinicluster when the run has any (scripts/test's -n)."""
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(Workers(), "raysub-workers")
