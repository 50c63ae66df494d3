"""What real sites do to jobs, on the real minicluster: --export=NONE, a reused job id, a driver that leaves
a daemon behind, and logs that must read clean after a good run."""

import sys
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job, submit

pytestmark = pytest.mark.slurm

NO_GPUS = ["--gpus-per-node", "0"]
VENV_ACTIVATE = Path(sys.executable).parent / "activate"


def test_export_none_with_a_setup_that_activates_the_venv(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    if not VENV_ACTIVATE.exists():
        pytest.fail(f"the test interpreter {sys.executable} is not in a venv with bin/activate")
    setup = f"source {VENV_ACTIVATE}"
    driver = [
        "python",
        "-c",
        "import ray; ray.init(); print('alive', len([n for n in ray.nodes() if n['Alive']]))",
    ]
    job_id, logs = submit(
        minicluster, slurm_tmp, ["--nodes", "3", *NO_GPUS, "--setup", setup, "--", *driver], "--export=NONE"
    )
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert "alive 3" in logs.driver_log.read_text()
    assert_clean(minicluster, job_id)


def test_a_stale_log_dir_under_the_same_job_id_is_moved_aside(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    job_id, logs = submit(minicluster, slurm_tmp, ["--nodes", "2", *NO_GPUS, "--", "true"], "--hold")
    (logs.path / protocol.AUTH_DIR).mkdir(parents=True, mode=0o700)
    logs.auth_token.write_text("an old job's token\n")
    logs.ended.write_text("an old job ended\n")
    logs.started_ray_head.write_text("198.18.0.99:6379\n")
    minicluster.run("scontrol", "release", str(job_id))
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert logs.ended.read_text() == "driver exited with status 0\n"
    [stale] = slurm_tmp.glob(f"{logs.path.name}.stale-*")
    assert (stale / protocol.ENDED).read_text() == "an old job ended\n"
    timeline = logs.file(protocol.TIMELINE).read_text()
    assert f'"phase": "{protocol.PHASE_STALE_LOG_DIR}"' in timeline
    assert_clean(minicluster, job_id)


def test_a_daemon_the_driver_leaves_behind_does_not_outlive_the_job(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    driver = ["bash", "-c", "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo started"]
    job_id, logs = submit(minicluster, slurm_tmp, ["--nodes", "2", *NO_GPUS, "--", *driver])
    while not logs.ended.exists():
        time.sleep(0.1)
    start = time.monotonic()
    result = minicluster.wait(job_id)
    took = time.monotonic() - start
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert took <= 5, f"the job stayed in squeue {took:.1f} s after the driver ended"
    left = [p for p in minicluster.wait_no_leftovers(timeout=5) if "sleep 1000" in p.cmdline]
    assert left == [], left
    assert_clean(minicluster, job_id)


def test_a_good_run_leaves_no_error_looking_line(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    result, logs = run_job(minicluster, slurm_tmp, ["--nodes", "4", *NO_GPUS, "--", "true"])
    assert result.exit_code == 0
    suspicious = ("Killed", "exit code 143", "error", "CANCELLED", "Terminated")
    for path in LogDir(logs.path).path.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if "raysub" in line or "srun" in line or "slurmstepd" in line or "head.sh" in line:
                assert not any(word in line for word in suspicious), f"{path.name}: {line}"
    assert_clean(minicluster, result.job_id)


def test_the_warning_reaches_the_python_under_a_shell_wrapper_and_the_wrapper_lives(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    child = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGUSR1, lambda *_: (pathlib.Path('got_usr1').touch(), sys.exit(0)))\n"
        "pathlib.Path('driver_running').touch()\n"
        "time.sleep(300)\n"
    )
    (slurm_tmp / "child.py").write_text(child)
    (slurm_tmp / "wrap.sh").write_text("python child.py\necho wrapper saw the child end $?\n")
    args = ["--nodes", "2", *NO_GPUS, "--forward-signal", "USR1", "--", "bash", "wrap.sh"]
    job_id, logs = submit(minicluster, slurm_tmp, args)
    while not (slurm_tmp / "driver_running").exists():
        time.sleep(0.1)
    minicluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    result = minicluster.wait(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    assert (slurm_tmp / "got_usr1").exists()
    assert "wrapper saw the child end 0" in logs.driver_log.read_text()
    assert_clean(minicluster, job_id)
