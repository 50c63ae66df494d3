"""The minicluster itself: batched sruns land on distinct hosts, and Ray runs across its nodes by hand."""

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.support.minicluster import MiniCluster

pytestmark = pytest.mark.slurm
JOBS = Path(__file__).parent / "jobs"


def write_job(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body).lstrip())
    return path


def test_batched_srun_runs_one_task_per_host(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    job = write_job(
        slurm_tmp / "job.sh",
        """
        set -euo pipefail
        first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
        report='printf "%s %s %s\\n" "$(hostname)" "$SLURM_PROCID" "$SLURMD_NODENAME"'
        srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --exclude="$first" bash -c "$report" > workers.txt
        srun --nodes=1 --ntasks=1 --nodelist="$first" bash -c "$report" > first.txt
        """,
    )
    job_id = minicluster.sbatch(job, "--nodes=4", "--time=2", "--output=batch.log")
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), (slurm_tmp / "batch.log").read_text()

    workers = [line.split() for line in (slurm_tmp / "workers.txt").read_text().splitlines()]
    first = (slurm_tmp / "first.txt").read_text().split()
    hosts = [w[0] for w in workers] + [first[0]]
    assert sorted(hosts) == ["node1", "node2", "node3", "node4"]
    assert sorted(w[1] for w in workers) == ["0", "1", "2"]
    assert first[1] == "0"
    assert all(w[0] == w[2] for w in [*workers, first]), "SLURMD_NODENAME must name the host"
    assert minicluster.steps(job_id) == 2
    assert minicluster.wait_no_leftovers() == []


def test_ray_by_hand_across_four_nodes(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    job_id = minicluster.sbatch(
        JOBS / "ray_by_hand.sbatch",
        "--output=batch.log",
        script_args=(str(JOBS / "ray_driver.py"),),
        cwd=slurm_tmp,
    )
    try:
        result = minicluster.wait(job_id)
    finally:
        shutil.rmtree(f"/tmp/rsh-{job_id}", ignore_errors=True)
    batch = (slurm_tmp / "batch.log").read_text()
    assert (result.state, result.exit_code) == ("COMPLETED", 0), batch
    assert "alive 4\n" in batch
    assert "hosts node1 node2 node3 node4\n" in batch
    assert minicluster.steps(job_id) == 2
    assert minicluster.wait_no_leftovers() == []
