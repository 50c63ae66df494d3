"""scripts/minicluster up and down are idempotent, and down leaves nothing of ours behind."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.minicluster import MiniCluster
from tests.support.prereq import REPO

pytestmark = pytest.mark.slurm


def netns_inodes(cluster: MiniCluster) -> set[int]:
    return {Path(f"/run/netns/{ns}").stat().st_ino for ns in cluster.netns()}


def processes_in(inodes: set[int]) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "ns" / "net").stat().st_ino in inodes:
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def ours(cluster: MiniCluster) -> list[str]:
    """Command lines of live processes that name the run directory or are Slurm or munge daemons.

    Ray's daemons are not looked for by name: the unit tests that start a Ray of their own run beside
    this one (scripts/test's workers). Every Ray process of a minicluster job lives in a node's network
    namespace, where processes_in finds it even after the namespace's name is gone."""
    out = subprocess.run(["ps", "-eo", "args="], text=True, capture_output=True, check=True).stdout
    daemons = ("slurmctld", "slurmd", "slurmstepd", "munged")
    return [
        line
        for line in out.splitlines()
        if str(cluster.run_dir) in line or any(line.split()[0].endswith(d) for d in daemons if line.split())
    ]


def test_up_and_down_are_idempotent_and_leave_nothing(minicluster: MiniCluster) -> None:
    again = minicluster.script("up", "--nodes", "4")
    assert "already up with 4 nodes" in again.stderr
    inodes = netns_inodes(minicluster)
    assert len(inodes) == 4

    minicluster.down()
    minicluster.down()
    try:
        assert minicluster.netns() == []
        assert processes_in(inodes) == []
        assert ours(minicluster) == []
        link = subprocess.run(["ip", "link", "show", "rsmcbr0"], capture_output=True, check=False)
        assert link.returncode != 0, "the bridge is still there"
        assert minicluster.script("status", check=False).returncode == 3
    finally:
        minicluster.up()
    status = minicluster.script("status")
    assert status.stdout.count(" idle ") == 4


def test_steps_of_a_job_without_sruns_is_zero(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    job = slurm_tmp / "job.sh"
    job.write_text("#!/bin/bash\nhostname\n")
    job_id = minicluster.sbatch(job, "--nodes=1", "--time=1", "--output=batch.log")
    assert minicluster.wait(job_id).state == "COMPLETED"
    assert minicluster.steps(job_id) == 0
    assert (slurm_tmp / "batch.log").read_text() == "node1\n"


def test_readme_try_it_command_runs_a_ray_job_end_to_end(minicluster: MiniCluster) -> None:
    out = minicluster.run(str(REPO / "scripts" / "try"), check=False, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "one task ran on each of: node1 node2 node3 node4\n" in out.stdout
    assert "ended: COMPLETED, exit code 0; driver exited with status 0" in out.stderr


def test_up_with_pin_runs_each_node_and_its_job_steps_on_a_cpu_of_its_own(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    pinned = MiniCluster(minicluster.run_dir, nodes=4, pin=True)
    try:
        pinned.up()  # the cluster was up unpinned: it comes up again, pinned
        job = slurm_tmp / "job.sh"
        task = 'echo "$(hostname) $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'
        job.write_text(f"#!/bin/bash\nsrun --nodes=4 --ntasks=4 --ntasks-per-node=1 sh -c '{task}'\n")
        job_id = pinned.sbatch(job, "--nodes=4", "--time=1", "--output=batch.log")
        assert pinned.wait(job_id).state == "COMPLETED"
        cpus = len(os.sched_getaffinity(0))
        lines = sorted((slurm_tmp / "batch.log").read_text().splitlines())
        assert lines == [f"node{k} {(k - 1) % cpus}" for k in range(1, 5)]
        # Asked again without --pin, it does not take the pinned cluster for the one asked for.
        assert "already up" not in minicluster.script("up", "--nodes", "4").stderr
    finally:
        minicluster.up()
