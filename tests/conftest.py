"""Shared fixtures; the ``slurm`` marker brings one minicluster up for the whole session."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.minicluster import MiniCluster, unavailable_reason
from tests.support.prereq import REPO, need


@pytest.fixture(scope="session")
def minicluster() -> Iterator[MiniCluster]:
    reason = unavailable_reason()
    need(reason is None, reason or "")
    cluster = MiniCluster(REPO / ".minicluster", nodes=4)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def slurm_tmp(tmp_path: Path) -> Path:
    """A job directory every node can reach (the nodes share this machine's filesystem)."""
    tmp_path.chmod(0o755)
    return tmp_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "slurm" in item.keywords and "minicluster" not in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} is marked slurm but does not use the minicluster fixture")
