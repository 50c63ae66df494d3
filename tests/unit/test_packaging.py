"""A wheel built from the tree carries the templates and the license and installs a working ``raysub``."""

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.prereq import REPO

# Slow (a wheel build and a pip install); CI runs it, quick local runs skip it with -m "not wheel".
pytestmark = pytest.mark.wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("raysub-*.whl")
    return built


def test_wheel_contains_every_template(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = [p.relative_to(REPO / "templates") for p in (REPO / "templates").rglob("*") if p.is_file()]
    assert templates, "templates/ is empty"
    missing = [str(t) for t in templates if f"raysub/templates/{t.as_posix()}" not in names]
    assert missing == []


def test_wheel_carries_the_license(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (license_file,) = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert archive.read(license_file) == (REPO / "LICENSE").read_bytes()


def test_wheel_installs_into_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    subprocess.run(
        [str(env_dir / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    out = subprocess.run(
        [str(env_dir / "bin" / "raysub"), "--help"], capture_output=True, text=True, check=True
    )
    assert "Usage: raysub" in out.stdout

    # pip install is enough for --strict: shellcheck comes with raysub, found though not on PATH.
    only_bash = tmp_path / "path"
    only_bash.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (only_bash / "bash").symlink_to(bash)
    job = tmp_path / "job.sub"
    raysub = str(env_dir / "bin" / "raysub")
    subprocess.run([raysub, "render", "--nodes", "2", "-o", str(job), "--", "true"], check=True)
    out = subprocess.run(
        [raysub, "validate", "--strict", str(job)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": str(only_bash)},
    )
    assert out.returncode == 0, out.stderr
