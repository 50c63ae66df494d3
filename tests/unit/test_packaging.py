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
    source = REPO / "raysub" / "job" / "templates"
    templates = [
        p.relative_to(REPO) for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    assert templates, "raysub/job/templates/ is empty"
    missing = [str(t) for t in templates if t.as_posix() not in names]
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
    # No Ray in this venv: the one command that needs it says so in a line, naming the Python to fix.
    out = subprocess.run([raysub, "smoke"], capture_output=True, text=True, check=False)
    assert (out.returncode, out.stderr.count("\n")) == (1, 1), out.stderr
    assert out.stderr.startswith(f"raysub smoke: no Ray in {env_dir / 'bin' / 'python'}"), out.stderr


def commands(raysub: str) -> list[str]:
    """The commands ``raysub --help`` lists."""
    listing = subprocess.run([raysub, "--help"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.partition("Commands:\n")[2].splitlines() if line.strip()]


def test_the_wheel_installs_next_to_a_frameworks_pinned_ray(
    wheel: Path, pinned_ray_venv: Path, tmp_path: Path
) -> None:
    """raysub goes into NeMo-RL's environment without moving its Ray pin, and every command runs there."""
    bin_dir = pinned_ray_venv / "bin"
    pip = [str(bin_dir / "pip"), "--disable-pip-version-check"]
    install = [*pip, "install", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout
    version = [str(bin_dir / "python"), "-c", "import ray; print(ray.__version__)"]
    assert subprocess.run(version, capture_output=True, text=True, check=True).stdout == "2.49.2\n"

    raysub = str(bin_dir / "raysub")
    names = commands(raysub)
    assert {"render", "validate", "status", "smoke"} <= set(names), names
    for name in names:
        out = subprocess.run([raysub, name, "--help"], capture_output=True, text=True, check=False)
        assert (out.returncode, out.stderr) == (0, ""), (name, out.stderr)
        assert out.stdout.startswith(f"usage: raysub {name}" if name == "smoke" else f"Usage: raysub {name}")
    job = tmp_path / "job.sub"
    render = [raysub, "render", "--nodes", "2", "--auth", "none", "-o", str(job), "--", "true"]
    subprocess.run(render, check=True)
    subprocess.run([raysub, "validate", "--strict", str(job)], check=True, capture_output=True)
    subprocess.run([raysub, "plan", "--tp", "8", "--gpus-per-node", "8"], check=True, capture_output=True)
