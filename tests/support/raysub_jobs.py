"""Render a raysub job, submit it to the minicluster, and check what it leaves behind."""

import time
from pathlib import Path

from raysub import protocol
from raysub.protocol.logdir import LogDir
from raysub.spec import JobSpec
from tests.support.minicluster import JobResult, MiniCluster


def submit(
    cluster: MiniCluster, workdir: Path, render_args: list[str], *sbatch_options: str
) -> tuple[int, LogDir]:
    """``raysub render ARGS > job.sub && sbatch job.sub`` in ``workdir``; returns the job id and LogDir."""
    script = workdir / "job.sub"
    script.write_text(cluster.run("raysub", "render", *render_args).stdout)
    job_id = cluster.sbatch(script, "--time=5", *sbatch_options, cwd=workdir)
    return job_id, LogDir.of(workdir, job_id)


def run_job(cluster: MiniCluster, workdir: Path, render_args: list[str]) -> tuple[JobResult, LogDir]:
    """Submit and wait for the job to end."""
    job_id, logs = submit(cluster, workdir, render_args)
    return cluster.wait(job_id), logs


def batch_output(workdir: Path, job_id: int | str) -> str:
    return (workdir / f"slurm-{job_id}.out").read_text()


def job_report(cluster: MiniCluster, workdir: Path, job_id: int | str) -> str:
    """Everything that explains how a job ended: for assertion messages of tests that expect success."""
    parts = [f"--- slurm-{job_id}.out\n{batch_output(workdir, job_id)}"]
    parts.append(cluster.run("scontrol", "-o", "show", "job", str(job_id), check=False).stdout)
    for log_dir in sorted(workdir.glob(f"{job_id}*{protocol.LOG_DIR_SUFFIX}")):
        for name in (protocol.ENDED, protocol.TIMELINE):
            path = log_dir / name
            if path.exists():
                parts.append(f"--- {log_dir.name}/{name}\n{path.read_text()}")
    controller = cluster.run_dir / "log" / "slurmctld.log"
    lines = [line for line in controller.read_text().splitlines() if f"JobId={job_id}" in line]
    parts.append("--- slurmctld.log\n" + "\n".join(lines[-40:]))
    return "\n".join(parts)


def wait_for(path: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.1)


def assert_clean(cluster: MiniCluster, job_id: int | str) -> None:
    """Nothing of the job runs on any node, and its per-node Ray temp dirs are gone."""
    left = cluster.wait_no_leftovers()
    assert left == [], left
    job_temp = Path(JobSpec(nodes=1).ray_temp_dir.replace("%j", str(job_id))).parent
    assert not job_temp.exists(), "the per-node Ray temp dirs were not removed"


def driver(workdir: Path, source: str) -> str:
    """The path of a driver program with ``source``, written into ``workdir``."""
    path = workdir / "driver.py"
    path.write_text(source)
    return str(path)


def wait_for_output(cluster: MiniCluster, workdir: Path, job_id: int | str, text: str) -> None:
    """Until the job's driver log has ``text`` (two minutes at most)."""
    logs = LogDir.of(workdir, job_id)
    deadline = time.monotonic() + 120
    while text not in (logs.driver_log.read_text() if logs.driver_log.exists() else ""):
        assert time.monotonic() < deadline, job_report(cluster, workdir, job_id)
        time.sleep(0.5)
