"""Unit tests never read or write the real user's job index: XDG_STATE_HOME points into a temp dir."""

from pathlib import Path

import pytest

from raysub.protocol.job_index import job_index_path


@pytest.fixture(autouse=True)
def job_index(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's (empty) job index; the path ``raysub`` commands read and write."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return job_index_path()
