"""Every real-Slurm test starts on an empty queue."""

from collections.abc import Iterator

import pytest

from tests.support.minicluster import MiniCluster


@pytest.fixture(autouse=True)
def empty_queue(minicluster: MiniCluster) -> Iterator[None]:
    """Cancels what a test left queued or running (one that failed halfway, say), so that the next
    test does not wait for nodes it holds: one failure stays one failure."""
    yield
    minicluster.cancel_all()
