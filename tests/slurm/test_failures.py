"""Fail fast, lose nothing: faults injected into real jobs on the minicluster end them quickly and loudly."""

import json
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import ray_logs
from raysub.protocol.logdir import LogDir
from tests.support.minicluster import MiniCluster
from tests.support.raysub_jobs import assert_clean, job_report, run_job, submit, wait_for

pytestmark = pytest.mark.slurm

NO_GPUS = ["--gpus-per-node", "0"]
# A driver that says it runs (a file in the submit dir) and then waits to be stopped.
LONG_DRIVER = [
    "python",
    "-c",
    "import pathlib, time, ray; ray.init(); pathlib.Path('driver_running').touch(); time.sleep(300)",
]


def timeline(logs: LogDir) -> list[dict[str, object]]:
    return [json.loads(line) for line in logs.file(protocol.TIMELINE).read_text().splitlines()]


def gone_within(cluster: MiniCluster, job_id: int, seconds: float) -> float:
    """Waits for the job to leave the queue; returns how long that took, failing past ``seconds`` + 60."""
    start = time.monotonic()
    cluster.wait(job_id, timeout=seconds + 60)
    return time.monotonic() - start


def test_killing_a_workers_ray_ends_the_job_fast_naming_the_node(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    job_id, logs = submit(minicluster, slurm_tmp, ["--nodes", "4", *NO_GPUS, "--", *LONG_DRIVER])
    wait_for(slurm_tmp / "driver_running")
    raylets = [pid for pid, cmd in minicluster.processes("node3").items() if "/raylet/raylet " in cmd]
    assert len(raylets) == 1, minicluster.processes("node3")
    minicluster.run("kill", "-KILL", str(raylets[0]))
    took = gone_within(minicluster, job_id, 10)
    result = minicluster.job(job_id)
    assert result.exit_code != 0
    assert took <= 10, f"the job took {took:.1f} s to end after the kill"
    ended = logs.ended.read_text()
    assert "node3" in ended, ended
    status = json.loads(minicluster.run("raysub", "status", "--json", str(logs.path)).stdout)
    assert (status["phase"], status["ended"]) == ("ended", ended.strip())
    assert_clean(minicluster, job_id)
    # The dead node's Ray logs are kept, and health quotes what they say of its death.
    kept = {log.tag for log in ray_logs.kept_logs(logs.path, "node3")}
    assert {"node3/raylet.out", "node3/ray_process_exit.log"} <= kept, kept
    checkup = minicluster.run("raysub", "health", "--json", str(logs.path), check=False)
    assert checkup.returncode == 1, checkup.stderr  # unhealthy
    health = json.loads(checkup.stdout)
    died = [f for f in health["findings"] if f["kind"] == "fatal" and f["node"] == "node3"]
    assert any(
        "Some Ray subprocesses exited unexpectedly: raylet [exit code=-9" in f["line"] for f in died
    ), died
    said = minicluster.run("raysub", "health", str(logs.path), check=False).stdout
    assert "error: ray_process_died in Ray's ray_process_exit.log on node3" in said, said


def test_a_worker_that_never_joins_ends_the_job_at_the_deadline(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    hang_on_node3 = "if [[ $(hostname) == node3 ]]; then sleep 600; fi"
    result, logs = run_job(
        minicluster,
        slurm_tmp,
        ["--nodes", "4", *NO_GPUS, "--setup", hang_on_node3, "--workers-timeout", "15", "--", "true"],
    )
    assert result.exit_code != 0
    ended = logs.ended.read_text()
    assert ended == "head on node1: 3/4 nodes joined after 15 s; missing: node3\n"
    times = {event["phase"]: float(str(event["t"])) for event in timeline(logs)}
    late = times[protocol.PHASE_ENDED] - times[protocol.PHASE_HEAD_READY]
    # Deadlines count whole seconds (bash's SECONDS), so "at 15 s" is anywhere from 14 to 16.
    assert 14 <= late <= 25, f"ended {late:.1f} s after the head was ready"
    assert_clean(minicluster, result.job_id)


def test_a_head_that_cannot_start_retries_then_fails_clearly(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    squat = ["python3", "-c", "import socket, time; s = socket.create_server(('', 6379)); time.sleep(600)"]
    with minicluster.node_netns_process("node1", *squat):
        time.sleep(0.5)
        result, logs = run_job(
            minicluster,
            slurm_tmp,
            ["--nodes", "2", *NO_GPUS, "--head-retries", "1", "--head-timeout", "10", "--", "true"],
        )
    assert result.exit_code != 0
    assert logs.ended.read_text() == "head on node1: Ray did not start after 2 attempts; see ray-head.log\n"
    assert "retrying the head start (attempt 2 of 2)" in logs.head_log.read_text()
    assert "joining" not in logs.worker_log(0, 1).read_text(), "a worker started Ray without a head"
    assert_clean(minicluster, result.job_id)


def test_a_node_without_the_shared_log_dir_is_named(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    base = slurm_tmp / "logs"
    base.mkdir()
    with minicluster.private_mount("node3", base):
        result, logs = run_job(
            minicluster, slurm_tmp, ["--nodes", "4", *NO_GPUS, "--log-dir", str(base), "--", "true"]
        )
    assert result.exit_code != 0
    logs = LogDir.of(base, result.job_id)
    ended = logs.ended.read_text()
    assert "node3" in ended, ended
    assert_clean(minicluster, result.job_id)


def test_requeue_keeps_every_attempt(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    driver = (
        "import os, pathlib, time, ray\n"
        "ray.init()\n"
        "if os.environ['SLURM_RESTART_COUNT'] == '0' if 'SLURM_RESTART_COUNT' in os.environ else True:\n"
        "    pathlib.Path('driver_running').touch(); time.sleep(300)\n"
        "print('second attempt')\n"
    )
    job_id, first = submit(
        minicluster, slurm_tmp, ["--nodes", "2", *NO_GPUS, "--requeue", "--", "python", "-c", driver]
    )
    wait_for(slurm_tmp / "driver_running")
    minicluster.run("scontrol", "requeue", str(job_id))
    # Slurm holds a requeued job back for two minutes; let it start again after two seconds. Not at once:
    # slurmd revoked the job's credential when it killed the first attempt, and a new credential from the
    # same second counts as revoked, so the launch fails and the job ends FAILED without running.
    while "JobState=PENDING" not in minicluster.run("scontrol", "-o", "show", "job", str(job_id)).stdout:
        time.sleep(0.2)
    minicluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now+2")
    result = minicluster.wait(job_id, timeout=300)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_report(minicluster, slurm_tmp, job_id)
    second = LogDir.of(slurm_tmp, job_id, 1)
    assert "SIGTERM" in first.ended.read_text()
    assert second.ended.read_text() == "driver exited with status 0\n"
    assert second.driver_log.read_text().endswith("second attempt\n")
    assert (slurm_tmp / protocol.LATEST).readlink() == Path(second.path.name)
    assert_clean(minicluster, job_id)


def test_scancel_of_a_running_job_leaves_an_ended_that_says_cancelled(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    # Slurm signals the steps deepest first: Ray, the unit counter and the driver die of the same TERM
    # around the batch script's trap, and none of them may be named instead of the cancel (issue 22, 9).
    job_id, logs = submit(minicluster, slurm_tmp, ["--nodes", "3", *NO_GPUS, "--", *LONG_DRIVER])
    wait_for(slurm_tmp / "driver_running")
    minicluster.run("scancel", str(job_id))
    result = minicluster.wait(job_id)
    assert result.state == "CANCELLED", result
    assert logs.ended.read_text().startswith("cancelled by Slurm (scancel"), logs.ended.read_text()
    ended = [e["detail"] for e in timeline(logs) if e["phase"] == protocol.PHASE_ENDED]
    assert len(ended) == 1 and str(ended[0]).startswith("cancelled by Slurm"), ended
    assert_clean(minicluster, job_id)


def test_usr1_to_the_batch_shell_reaches_the_driver(minicluster: MiniCluster, slurm_tmp: Path) -> None:
    driver = (
        "import pathlib, signal, sys, time, ray\n"
        "ray.init()\n"
        "signal.signal(signal.SIGUSR1, lambda *_: (pathlib.Path('got_usr1').touch(), sys.exit(0)))\n"
        "pathlib.Path('driver_running').touch()\n"
        "time.sleep(300)\n"
    )
    args = ["--nodes", "2", *NO_GPUS, "--forward-signal", "USR1", "--", "python", "-c", driver]
    job_id, logs = submit(minicluster, slurm_tmp, args)
    wait_for(slurm_tmp / "driver_running")
    minicluster.run("scancel", "--batch", "--signal=USR1", str(job_id))
    result = minicluster.wait(job_id)
    assert (slurm_tmp / "got_usr1").exists()
    assert (result.state, result.exit_code) == ("COMPLETED", 0)
    forwarded = [e["detail"] for e in timeline(logs) if e["phase"] == protocol.PHASE_SIGNAL_FORWARDED]
    assert forwarded == ["SIGUSR1 to the driver"]
    assert_clean(minicluster, job_id)


def test_timeline_of_a_whole_run_and_secrets_kept_out_of_logs(
    minicluster: MiniCluster, slurm_tmp: Path
) -> None:
    secret = "s3cr3t-value-4711"  # noqa: S105 (a made-up value the test looks for)
    result, logs = run_job(
        minicluster, slurm_tmp, ["--nodes", "4", *NO_GPUS, "--env", f"WANDB_API_KEY={secret}", "--", "true"]
    )
    assert result.exit_code == 0
    events = timeline(logs)
    times = [float(str(e["t"])) for e in events]
    assert times == sorted(times)
    phases = [str(e["phase"]) for e in events]
    expected = [
        protocol.PHASE_JOB_START,
        protocol.PHASE_HEAD_READY,
        protocol.PHASE_DRIVER_START,
        protocol.PHASE_DRIVER_END,
        protocol.PHASE_ENDED,
    ]
    assert [p for p in phases if p in expected] == expected
    assert sorted(str(e["node"]) for e in events if e["phase"] == protocol.PHASE_CANARY_OK) == [
        f"node{k}" for k in range(1, 5)
    ]
    joined = sorted(str(e["detail"]) for e in events if e["phase"] == protocol.PHASE_WORKER_JOINED)
    assert joined == [f"node{k}" for k in range(1, 5)]
    files = [path for path in logs.path.rglob("*") if path.is_file()]
    for path in [*files, slurm_tmp / f"slurm-{result.job_id}.out"]:
        assert secret not in path.read_text(errors="replace"), path
