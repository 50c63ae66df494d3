"""raysub submit on the minicluster (issue 26, items 2 and 3): the stages in order and the driver's exit
code with --wait; a held job's pending reason, in submit's line and in raysub status; the dashboard line,
and raysub dashboard's address and token header reaching the job's own dashboard."""

import getpass
import json
import queue
import subprocess
import threading
import urllib.error
import urllib.request
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
    dashboard = next(line for line in stages if line.startswith("dashboard: "))
    stages.remove(dashboard)
    indexes = [stage_index(line) for line in stages]
    assert indexes == sorted(indexes), stages
    assert_clean(minicluster, job_id)


def http_status(url: str, headers: dict[str, str]) -> int:
    """The HTTP status of a GET of ``url`` (an http:// URL this module builds)."""
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_dashboard_line_and_raysub_dashboard_lead_to_the_jobs_own_dashboard(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    """On shared nodes the dashboard's port is the job's own (--ports block): only the head knows it."""
    driver = ["python", "-c", "import time; time.sleep(600)"]
    submitted = minicluster.run(
        "raysub", "submit", *JOB, "--no-exclusive", "--", *driver, cwd=slurm_tmp, timeout=300
    )
    job_id = submitted.stdout.strip()
    try:
        stages = submitted.stderr.splitlines()[1:]
        dashboard = next(line for line in stages if line.startswith("dashboard: "))
        assert stages.index(dashboard) < stages.index("driver running"), stages
        found = json.loads(
            minicluster.run(
                "raysub", "dashboard", job_id, "--json", "--login-host", "login", cwd=slurm_tmp
            ).stdout
        )
        address = found["address"]
        assert dashboard == f"dashboard: http://{address} (from your laptop: raysub dashboard {job_id})"
        assert not address.endswith(":8265"), "a shared node's dashboard takes a port of the job's block"
        assert found["ssh"] == f"ssh -N -L 8265:{address} {getpass.getuser()}@login"
        # What the laptop's end of the tunnel reaches, asked here directly: the header is the key.
        jobs_api = f"http://{address}/api/jobs/"
        assert http_status(jobs_api, {"Authorization": found["header"].partition(": ")[2]}) == 200
        assert http_status(jobs_api, {}) in (401, 403)
    finally:
        minicluster.run("scancel", job_id, check=False)
    minicluster.wait(job_id)
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
