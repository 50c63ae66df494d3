"""Shared fixtures; the ``slurm`` marker brings one minicluster up for the whole session."""

import subprocess
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from raysub.cli import main
from tests.support import phases, workers
from tests.support.minicluster import MiniCluster, unavailable_reason
from tests.support.prereq import REPO, need


@pytest.fixture(scope="session")
def minicluster() -> Iterator[MiniCluster]:
    reason = unavailable_reason()
    need(reason is None, reason or "")
    workers.prefer_minicluster()
    cluster = MiniCluster(REPO / ".minicluster", nodes=4)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


# A framework's own environment: NeMo-RL pins this Ray (pyproject.toml of NVIDIA-NeMo/RL, 2026), which is
# older than the 2.52 that token authentication needs.
PINNED_RAY = "ray[default]==2.49.2"


@pytest.fixture(scope="session")
def pinned_ray_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with PINNED_RAY in it, readable by the minicluster's jobs (a minute or two to install)."""
    base = tmp_path_factory.mktemp("pinned-ray")
    base.chmod(0o755)
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [env_dir / "bin" / "pip", "install", "-q", "--disable-pip-version-check", PINNED_RAY],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    return env_dir


@pytest.fixture
def slurm_tmp(tmp_path: Path) -> Path:
    """A job directory every node can reach (the nodes share this machine's filesystem)."""
    tmp_path.chmod(0o755)
    return tmp_path


def pytest_configure(config: pytest.Config) -> None:
    phases.register(config)
    workers.register(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "slurm" in item.keywords and "minicluster" not in getattr(item, "fixturenames", ()):
            raise pytest.UsageError(f"{item.nodeid} is marked slurm but does not use the minicluster fixture")
        if "slurm" in item.keywords and not item.nodeid.startswith(workers.SLURM_TESTS):
            # Only there do the workers run it apart from every other minicluster test.
            raise pytest.UsageError(f"{item.nodeid} is marked slurm but is not under {workers.SLURM_TESTS}")
    items.sort(key=workers.start_rank)  # the longest first, for scripts/test's workers


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


RunCli = Callable[..., CliResult]


@pytest.fixture
def raysub_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Runs ``raysub ARGS...`` in-process through the real entry point; returns code, stdout, stderr."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        else:
            code = 0
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run
