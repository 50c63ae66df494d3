"""Run a rendered batch script here, with the recording fake srun (tests/fakes/srun) and the real scontrol
replaced by a fake: what each step would have started, with which options and environment."""

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raysub.job.render import render
from raysub.protocol.logdir import LogDir
from raysub.spec import JobSpec
from tests.support.prereq import REPO

FAKES = REPO / "tests" / "fakes"
NODES = ("nodeA", "nodeB", "nodeC")


@dataclass(frozen=True)
class Step:
    """One recorded srun call: its arguments and its environment."""

    argv: list[str]
    env: dict[str, str]

    @property
    def script(self) -> str:
        """The LOG_DIR script the step runs (its last argument), or the command it runs."""
        return Path(self.argv[-1]).name

    def options(self, prefix: str) -> list[str]:
        return [a for a in self.argv if a.startswith(prefix)]


@dataclass(frozen=True)
class BatchRun:
    done: subprocess.CompletedProcess[str]
    log_dir: LogDir
    steps: dict[str, Step]  # by script name


def job_spec(temp_tag: str, **overrides: Any) -> JobSpec:
    """A small job that runs here: no GPUs, loopback, logs under the relative directory "runs", no monitor,
    and Ray temp dirs under /tmp/<temp_tag><jobid>/ (the caller removes them)."""
    values: dict[str, Any] = {
        "nodes": 3,
        "gpus_per_node": 0,
        "command": ("true",),
        "interface": "lo",
        "ray_temp_dir": f"/tmp/{temp_tag}%j/%n",
        "log_dir": "runs",
        "monitor": False,
    }
    return JobSpec(**{**values, **overrides})


def read_env(path: Path) -> dict[str, str]:
    """An environment as 'env -0' wrote it."""
    entries = path.read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in entries if e)


def recorded_steps(srun_dir: Path) -> list[Step]:
    """What the fake srun recorded, in call order."""
    calls = sorted(srun_dir.glob("*.argv"), key=lambda p: int(p.stem))
    return [Step(p.read_bytes().decode().split("\0")[:-1], read_env(p.with_suffix(".env"))) for p in calls]


def environment(spec: JobSpec, job_id: str, srun_dir: Path, restart: int = 0) -> dict[str, str]:
    """What Slurm gives a batch script on the first of ``spec.nodes`` nodes, fakes first on PATH."""
    return {
        "PATH": f"{FAKES}:/usr/bin:/bin",
        "SLURM_JOB_ID": job_id,
        "SLURM_JOB_NODELIST": ",".join(NODES[: spec.nodes]),
        "SLURMD_NODENAME": NODES[0],
        "SLURM_RESTART_COUNT": str(restart),
        "FAKE_SRUN_DIR": str(srun_dir),
    }


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


def run_batch_script(
    tmp_path: Path, spec: JobSpec, env: dict[str, str], job_id: str, restart: int = 0
) -> BatchRun:
    """Render ``spec`` (a relative --log-dir is taken from ``tmp_path/submit``) and run its batch script
    there, ``env`` over what Slurm would give it; every step "starts" and returns at once, so the
    supervisor ends the job with status 1, as designed."""
    submit = tmp_path / "submit"
    submit.mkdir(exist_ok=True)
    job = submit / "job.sub"
    job.write_text(render(spec))
    srun_dir = tmp_path / "srun"
    shutil.rmtree(srun_dir, ignore_errors=True)
    srun_dir.mkdir()
    done = run(["bash", str(job)], {**environment(spec, job_id, srun_dir, restart), **env}, submit)
    assert done.returncode == 1, done.stderr[-2000:]
    log_dir = LogDir.of(submit / (spec.log_dir or ""), job_id, restart)
    assert log_dir.ended.read_text().startswith(("head job step", "workers job step", "sandbox job step")), (
        done.stderr
    )
    return BatchRun(done, log_dir, {step.script: step for step in recorded_steps(srun_dir)})
