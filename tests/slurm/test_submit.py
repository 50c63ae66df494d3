"""raysub submit on the minicluster (issue 26, item 2): the stages in order and the driver's exit code with
--wait; a held job's pending reason, in submit's line and in raysub status."""

import queue
import subprocess
import threading
from pathlib import Path
from typing import IO

import pytest

from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean

pytestmark = pytest.mark.slurm

JOB = ["--nodes", "3", "--gpus-per-node", "0", "--time", "5"]
# The driver runs for a few seconds, so a look once a second sees it running, then exits 3.
DRIVER = "import ray, sys, time\nray.init()\ntime.sleep(4)\nsys.exit(3)"
STAGES = ["queued", "head starting", "workers ", "driver running", "finished with exit code"]


def stage_index(line: str) -> int:
    return next(k for k, stage in enumerate(STAGES) if line.startswith(stage))


def test_submit_wait_shows_the_stages_in_order_and_exits_with_the_drivers_code(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    submitted = minicluster.run(
        "raysub",
        "submit",
        *JOB,
        "--wait",
        "--",
        "python",
        "-c",
        DRIVER,
        cwd=slurm_tmp,
        check=False,
        timeout=300,
    )
    assert submitted.returncode == 3, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit(), submitted.stdout
    said, *stages = submitted.stderr.splitlines()
    assert said == f"raysub: submitted job {job_id}; its logs go to {slurm_tmp / f'{job_id}-logs'}"
    assert stages[-1] == "finished with exit code 3", stages
    assert "driver running" in stages, stages
    indexes = [stage_index(line) for line in stages]
    assert indexes == sorted(indexes), stages
    assert_clean(minicluster, job_id)


def pass_lines(stream: IO[str], lines: "queue.Queue[str]") -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


def test_a_held_job_shows_why_it_waits_in_submit_and_in_status(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    argv = ["raysub", "submit", *JOB, "--sbatch-arg=--hold", "--", "true"]
    lines: queue.Queue[str] = queue.Queue()
    submitting = subprocess.Popen(
        argv, cwd=slurm_tmp, env=minicluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert submitting.stderr is not None and submitting.stdout is not None
        threading.Thread(target=pass_lines, args=(submitting.stderr, lines), daemon=True).start()
        said = lines.get(timeout=60)
        job_id = said.removeprefix("raysub: submitted job ").partition(";")[0]
        assert job_id.isdigit(), said
        # sbatch --hold is the submitter's own hold, even root's; scontrol hold by root is an administrator's.
        assert lines.get(timeout=60) == "queued: held by you: scontrol release JOB (JobHeldUser)"
        minicluster.run("scontrol", "hold", job_id)
        held = lines.get(timeout=60)
        assert held == "queued: held by an administrator (or root) (JobHeldAdmin)", held
        status = minicluster.run("raysub", "status", job_id, cwd=slurm_tmp).stdout
        assert f"pending: {held.removeprefix('queued: ')}" in status.splitlines(), status
        minicluster.run("scontrol", "release", job_id)
        assert submitting.wait(timeout=240) == 0
        assert submitting.stdout.read().strip() == job_id
    finally:
        submitting.kill()  # a failed assertion must not leave it following the job
        submitting.wait()
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert rest[-1] == "driver running" or rest[-1].startswith("finished with exit code 0"), rest
    minicluster.wait(job_id)
    assert_clean(minicluster, job_id)
