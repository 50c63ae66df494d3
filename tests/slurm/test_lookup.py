"""raysub finds a job by its id from any directory, while it runs and after it ended: through the per-user job
index the batch script writes, or through Slurm's record of the job (real minicluster)."""

import json
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.job_index import read_job_index
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, wait_for

pytestmark = pytest.mark.slurm


def driver(running: Path, release: Path) -> str:
    """A driver that says it runs, waits until the test lets it go, prints 'driver done' and exits 0."""
    return (
        "import pathlib, time, ray\n"
        "ray.init()\n"
        f"pathlib.Path({str(running)!r}).touch()\n"
        "deadline = time.time() + 120\n"
        f"while not pathlib.Path({str(release)!r}).exists() and time.time() < deadline:\n"
        "    time.sleep(0.2)\n"
        "print('driver done')\n"
    )


def dirs(root: Path, *names: str) -> list[Path]:
    made = []
    for name in names:
        (root / name).mkdir(mode=0o755)
        made.append(root / name)
    return made


def submit_with_state(cluster: MiniCluster, submit_dir: Path, state: Path, render_args: list[str]) -> int:
    """Render and submit from ``submit_dir``, the job's XDG_STATE_HOME set to ``state``."""
    script = submit_dir / "job.sub"
    script.write_text(cluster.run("raysub", "render", *render_args).stdout)
    return cluster.sbatch(script, "--time=5", f"--export=ALL,XDG_STATE_HOME={state}", cwd=submit_dir)


def status(cluster: MiniCluster, job_id: int, cwd: Path, state: Path) -> dict[str, object]:
    out = cluster.run("raysub", "status", "--json", str(job_id), cwd=cwd, env={"XDG_STATE_HOME": str(state)})
    parsed: dict[str, object] = json.loads(out.stdout)
    return parsed


def where(found: dict[str, object]) -> Path:
    return Path(str(found["log_dir"])).resolve()


def test_status_and_logs_find_a_job_with_another_log_dir_from_a_third_directory(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    submit_dir, base, third, state = dirs(slurm_tmp, "submit", "logs-elsewhere", "third", "state")
    running, release = slurm_tmp / "driver_running", slurm_tmp / "release"
    render_args = ["--nodes", "2", "--gpus-per-node", "0", "--log-dir", str(base)]
    job_id = submit_with_state(
        minicluster, submit_dir, state, [*render_args, "--", "python", "-c", driver(running, release)]
    )
    logs = LogDir.of(base, job_id)
    try:
        wait_for(running)
        during = status(minicluster, job_id, third, state)
        assert (where(during), during["phase"]) == (logs.path.resolve(), "driver running")
    finally:
        release.touch()
    result = minicluster.wait(job_id)
    assert result.exit_code == 0, job_report(minicluster, submit_dir, job_id)

    (entry,) = read_job_index(state / protocol.JOB_INDEX_DIR / protocol.JOB_INDEX)
    assert (entry.job_id, entry.requeues, entry.log_dir) == (str(job_id), 0, logs.path.resolve())
    after = status(minicluster, job_id, third, state)
    assert (where(after), after["phase"]) == (logs.path.resolve(), "finished with exit code 0")
    out = minicluster.run(
        "raysub", "logs", str(job_id), "--driver", cwd=third, env={"XDG_STATE_HOME": str(state)}
    ).stdout
    assert "driver | driver done" in out
    assert_clean(minicluster, job_id)


def test_without_the_index_slurms_record_finds_the_job(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    submit_dir, third, state = dirs(slurm_tmp, "submit", "third", "state")
    job_id = submit_with_state(
        minicluster, submit_dir, state, ["--nodes", "1", "--gpus-per-node", "0", "--", "true"]
    )
    result = minicluster.wait(job_id)
    assert result.exit_code == 0, job_report(minicluster, submit_dir, job_id)
    (state / protocol.JOB_INDEX_DIR / protocol.JOB_INDEX).unlink()  # lost, or never written

    found = status(minicluster, job_id, third, state)  # scontrol's WorkDir: the submit directory
    assert where(found) == LogDir.of(submit_dir, job_id).path.resolve()
    assert found["phase"] == "finished with exit code 0"

    unknown = minicluster.run(
        "raysub", "status", "999999", check=False, cwd=third, env={"XDG_STATE_HOME": str(state)}
    )
    assert unknown.returncode == 2
    assert f"under {third} (the current directory)" in unknown.stderr
    assert "has no job 999999" in unknown.stderr
    assert "Slurm does not know job 999999" in unknown.stderr
