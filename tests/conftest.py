"""Shared fixtures; the ``slurm`` marker brings one minicluster up for the whole session."""

import subprocess
import threading
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
def minicluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MiniCluster]:
    reason = unavailable_reason()
    need(reason is None, reason or "")
    workers.prefer_minicluster()
    PINNED.start(tmp_path_factory)  # test_pinned_ray's venv, installed while the tests before it run
    cluster = MiniCluster(REPO / ".minicluster", nodes=4)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


# A framework's own environment: NeMo-RL pins this Ray (pyproject.toml of NVIDIA-NeMo/RL, 2026), which is
# older than the 2.52 that token authentication needs.
PINNED_RAY = "ray[default]==2.49.2"


class PinnedRay:
    """The venv with PINNED_RAY, built once per session in a thread: the minicluster's worker starts it as
    the minicluster comes up, so that its install (a minute of download and unpacking, at nice 10 behind
    the minicluster's jobs) overlaps the real-Slurm tests that run before the ones that need it."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.env_dir = Path()
        self.error: BaseException | None = None

    def start(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        if self.thread is not None:
            return
        base = tmp_path_factory.mktemp("pinned-ray")
        base.chmod(0o755)  # readable by the minicluster's jobs
        self.env_dir = base / "venv"
        self.thread = threading.Thread(target=self._build, name="pinned-ray", daemon=True)
        self.thread.start()

    def _build(self) -> None:
        try:
            venv.create(self.env_dir, with_pip=True)
            pip = [
                str(self.env_dir / "bin" / "pip"),
                "install",
                "-q",
                "--disable-pip-version-check",
                PINNED_RAY,
            ]
            subprocess.run(
                ["nice", "-n", "10", *pip], check=True, capture_output=True, stdin=subprocess.DEVNULL
            )
        except BaseException as error:  # raised again in the test that waits for it
            self.error = error

    def wait(self) -> Path:
        assert self.thread is not None
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.env_dir


PINNED = PinnedRay()


@pytest.fixture(scope="session")
def pinned_ray_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with PINNED_RAY in it, readable by the minicluster's jobs (a minute or two to install)."""
    PINNED.start(tmp_path_factory)
    return PINNED.wait()


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
