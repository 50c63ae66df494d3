"""The early driver's gate (raysub/job/programs/driver_gate.py), loaded as the job loads it: as sitecustomize
from its own directory first on PYTHONPATH, into a Python whose ``ray`` is a stand-in that notes its calls."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.job.programs import driver_gate
from raysub.job.render import node_library
from raysub.job.view import JobView, runs_python_with_site
from raysub.spec import JobSpec, Sandbox

GATE = dict(node_library())[f"{protocol.NODE_PYTHON_DIR}/{protocol.DRIVER_GATE_DIR}/sitecustomize.py"]
DRIVER = """
import os, subprocess, sys
import ray
print("init returned", ray.init(address="auto"), ray.init.__name__, flush=True)
child = "import sys; print('child:', type(sys.modules.get('sitecustomize')).__name__)"
subprocess.run([sys.executable, "-c", child], check=True)
gate = os.environ.get(sys.argv[1], "gone")
print("env:", os.environ.get("PYTHONPATH", "unset"), gate, flush=True)
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A gate directory as the batch script writes it, and a stand-in ray package."""
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "sitecustomize.py").write_text(GATE.read_text())
    (tmp_path / "lib" / "ray").mkdir(parents=True)
    (tmp_path / "lib" / "ray" / "__init__.py").write_text(
        "def init(address=None):\n    print('connected to', address, flush=True)\n    return 'context'\n"
    )
    (tmp_path / "driver.py").write_text(DRIVER)
    return tmp_path


def start(job: Path, *, gate: bool = True, pythonpath: str | None = None) -> subprocess.Popen[str]:
    original = os.pathsep.join(p for p in (str(job / "lib"), pythonpath) if p)
    env = {k: v for k, v in os.environ.items() if not k.startswith(protocol.ENV_PREFIX)}
    env["PYTHONPATH"] = f"{job / 'gate'}{os.pathsep}{original}"
    if gate:
        env[protocol.ENV_DRIVER_GATE] = str(job / protocol.DRIVER_STARTED)
        env[protocol.ENV_DRIVER_GATE_ENDED] = str(job / protocol.ENDED)
        env[protocol.ENV_DRIVER_PYTHONPATH] = original
        env[protocol.ENV_DRIVER_GATE_LOOK] = str(JobSpec(nodes=1).timing.gate_look_s)
    argv = [sys.executable, str(job / "driver.py"), protocol.ENV_DRIVER_GATE]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_the_gates_names_are_the_protocols() -> None:
    assert driver_gate.ENV_OPEN == protocol.ENV_DRIVER_GATE
    assert driver_gate.ENV_ENDED == protocol.ENV_DRIVER_GATE_ENDED
    assert driver_gate.ENV_PYTHONPATH == protocol.ENV_DRIVER_PYTHONPATH
    assert driver_gate.ENV_LOOK == protocol.ENV_DRIVER_GATE_LOOK


def test_ray_init_connects_at_once_and_returns_once_the_gate_opens(job: Path) -> None:
    driver = start(job)
    assert driver.stdout is not None
    assert driver.stdout.readline() == "connected to auto\n"
    time.sleep(0.3)
    assert driver.poll() is None  # held in ray.init
    (job / protocol.DRIVER_STARTED).write_text("127.0.0.1:6379\n")
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 0, out
    # The driver's own code goes on; what it starts neither loads the gate nor sees its variables.
    assert out.splitlines() == ["init returned context init", "child: NoneType", f"env: {job / 'lib'} gone"]


def test_the_job_ending_first_ends_the_driver_with_the_reason(job: Path) -> None:
    driver = start(job)
    (job / protocol.ENDED).write_text("worker 1 on node3: Ray did not start\n")
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 1
    reason = f"raysub: the job ended before the cluster was whole ({job / protocol.ENDED})"
    assert out.splitlines()[-1] == reason


def test_a_sitecustomize_further_on_the_path_still_runs(job: Path) -> None:
    (job / "site").mkdir()
    (job / "site" / "sitecustomize.py").write_text("print('site of the venv', flush=True)\n")
    (job / protocol.DRIVER_STARTED).touch()
    driver = start(job, pythonpath=str(job / "site"))
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 0, out
    lines = out.splitlines()
    assert lines[:3] == ["site of the venv", "connected to auto", "init returned context init"]
    assert lines[-1] == f"env: {job / 'lib'}{os.pathsep}{job / 'site'} gone"


def test_without_the_heads_variables_the_gate_only_hands_on(job: Path) -> None:
    driver = start(job, gate=False)
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 0, out
    assert out.splitlines()[:2] == ["connected to auto", "init returned context init"]


@pytest.mark.parametrize(
    ("argv", "early"),
    [
        (("python", "train.py"), True),
        (("python3.11", "-u", "train.py"), True),
        (("/opt/venv/bin/python3", "-m", "nemo_rl.run"), True),
        (("python", "-W", "ignore", "-Xfrozen_modules=off", "x.py"), True),
        (("python", "-c", "import ray"), True),
        (("python", "-I", "train.py"), False),  # isolated: no PYTHONPATH
        (("python", "-uE", "train.py"), False),  # ignores PYTHONPATH
        (("python3", "-S", "train.py"), False),  # no site, no sitecustomize
        (("python", "-W", "I", "train.py"), True),  # -W's value, not -I
        (("bash", "run.sh"), False),  # a wrapper's shell runs before any gate could hold it
        (("torchrun", "--nproc-per-node=8", "train.py"), False),
        (("pythonw", "x.py"), False),
    ],
)
def test_which_commands_start_early(argv: tuple[str, ...], early: bool) -> None:
    assert runs_python_with_site(argv) is early
    assert JobView(JobSpec(nodes=2, command=argv)).starts_driver_early is early
    assert not JobView(JobSpec(nodes=2, command=argv, early_driver=False)).starts_driver_early


def test_jobs_whose_driver_needs_a_whole_cluster_first_have_no_early_driver() -> None:
    assert not JobView(JobSpec(nodes=2, smoke=True)).starts_driver_early
    assert not JobView(JobSpec(nodes=2)).starts_driver_early  # interactive
    python = ("python", "train.py")
    assert not JobView(JobSpec(nodes=2, command=python, driver_restarts=2)).starts_driver_early
    assert not JobView(JobSpec(nodes=2, command=python, checkpoint_dir="/ckpt")).starts_driver_early
    sandbox = Sandbox(command="serve", port=6000)
    assert not JobView(JobSpec(nodes=2, command=python, sandbox=sandbox)).starts_driver_early
