"""raysub health over LOG_DIRs written with the protocol's writers and recorded-format log lines (Slurm's
answer faked): each finding, the verdict and exit status, and the stall seen across reports."""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from raysub import protocol
from raysub.health.report import Options, Severity, Verdict, check, stall_check
from raysub.jobs import Job
from raysub.node.metrics_log import snapshot_line
from raysub.node.readings import GpuMetrics, NodeMetrics
from raysub.slurm import SlurmState
from tests.conftest import RunCli

NOW = 1_800_000_000.0
RUNNING = SlurmState("RUNNING", None, "test")
STEPS = "".join(f"step:{k} - actor/pg_loss:-0.01 - timing_s/step:2.0\n" for k in range(1, 8))
IB_HEAD = (
    "node1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n"
    "node1:1:1 [0] NCCL INFO Using network IB\n"
)
SOCKET_WORKER = (
    "(RayTrainWorker pid=77, ip=10.0.0.2) node2:77:77 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n"
    "(RayTrainWorker pid=77, ip=10.0.0.2) node2:77:77 [0] NCCL INFO Using network Socket\n"
)


def running_job(tmp_path: Path, driver_log: str = STEPS, started: float = NOW - 3600) -> Job:
    logs = protocol.LogDir(tmp_path / "4711-logs")
    logs.path.mkdir()
    logs.write_node_map(
        [
            protocol.NodeEntry(protocol.ROLE_HEAD, 0, "node1"),
            protocol.NodeEntry(protocol.ROLE_WORKER, 0, "node2"),
        ]
    )
    logs.file(protocol.DRIVER_STARTED).write_text("10.0.0.1:6379\n")
    logs.driver_log.write_text(driver_log)
    os.utime(logs.driver_log, (NOW - 10, NOW - 10))
    logs.file(protocol.TIMELINE).write_text(
        protocol.TimelineEvent(started, protocol.PHASE_DRIVER_START, "node1", "").line()
    )
    return Job("4711", 0, logs)


def gpus(*utils: float | None) -> NodeMetrics:
    gpu = [GpuMetrics(str(k), "NVIDIA H100 80GB HBM3", u, 10.0, 80.0) for k, u in enumerate(utils)]
    return NodeMetrics("10.0.0.1", 12.0, 100.0, 2000.0, gpu, {"GPU": {"used": 8.0, "available": 0.0}})


def write_snapshots(job: Job, nodes: dict[str, NodeMetrics], times: list[float]) -> None:
    with job.logs.metrics.open("w") as out:
        for t in times:
            record = json.loads(snapshot_line(nodes, {}, []))
            record["t"] = t
            out.write(json.dumps(record) + "\n")


def test_a_running_job_making_progress_is_healthy_with_its_step(tmp_path: Path) -> None:
    job = running_job(tmp_path, STEPS + IB_HEAD)
    write_snapshots(job, {"node1": gpus(90.0, 85.0)}, [NOW - 20, NOW - 10])
    report = check(job, RUNNING, Options(), now=NOW)
    assert (report.verdict, report.findings, report.step, report.state) == (Verdict.HEALTHY, [], 7, "RUNNING")
    assert report.steps_per_second == pytest.approx(0.5)
    assert report.resources == {"GPU": {"used": 8.0, "total": 8.0}}
    assert json.loads(report.to_json())["healthy"] is True


def test_a_step_that_does_not_move_is_a_stall_across_reports(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    options = Options(stall_after=300)
    assert check(job, RUNNING, options, now=NOW).verdict == Verdict.HEALTHY  # first seen: step 7
    later = check(job, RUNNING, options, now=NOW + 301)
    assert later.verdict == Verdict.UNHEALTHY
    [stall] = later.findings
    assert (stall.kind, stall.severity) == ("stall", Severity.ERROR)
    assert stall.reason.startswith("no new step after step 7 for ")
    assert stall.line is not None and stall.line.startswith("step:7 ")
    with job.logs.driver_log.open("a") as out:
        out.write("step:8 - actor/pg_loss:-0.01\n")
    assert check(job, RUNNING, options, now=NOW + 302).verdict == Verdict.HEALTHY  # it moved again
    assert stall_check(options)(job) is False


def test_a_driver_silent_from_the_start_is_stalled(tmp_path: Path) -> None:
    job = running_job(tmp_path, "loading the model\n")
    os.utime(job.logs.driver_log, (NOW - 2000, NOW - 2000))
    [stall] = check(job, RUNNING, Options(), now=NOW).findings
    assert stall.reason.startswith("no output from the driver for ")


@pytest.mark.parametrize(
    ("state", "verdict"),
    [("FAILED", Verdict.UNHEALTHY), ("NODE_FAIL", Verdict.UNHEALTHY), ("PENDING", Verdict.CANNOT_TELL),
     (None, Verdict.CANNOT_TELL), ("COMPLETING", Verdict.HEALTHY)],
)  # fmt: skip
def test_slurm_states(tmp_path: Path, state: str | None, verdict: Verdict) -> None:
    job = running_job(tmp_path)
    report = check(job, SlurmState(state), Options(), now=NOW)
    assert report.verdict == verdict
    assert report.state == {None: "UNKNOWN", "COMPLETING": "RUNNING"}.get(state, state)


def test_gpus_idle_while_the_driver_runs(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    times = [NOW - 600 + 10 * k for k in range(61)]
    write_snapshots(job, {"node1": gpus(0.0, 1.0, None)}, times)
    [idle] = check(job, RUNNING, Options(gpu_idle_after=600), now=NOW).findings
    assert (idle.kind, idle.severity) == ("gpu_idle", Severity.WARNING)
    assert idle.reason == "all 2 GPUs below 5% for the last 600 s"
    # a GPU whose utilisation is unknown is not idle; one busy GPU is not idle either
    write_snapshots(job, {"node1": gpus(None, None)}, times)
    assert check(job, RUNNING, Options(), now=NOW).findings == []
    write_snapshots(job, {"node1": gpus(0.0, 60.0)}, times)
    assert check(job, RUNNING, Options(), now=NOW).findings == []


def test_a_node_on_sockets_among_ib_nodes_and_a_fatal_line_on_its_node(tmp_path: Path) -> None:
    oom = "(RayTrainWorker pid=77, ip=10.0.0.2) torch.OutOfMemoryError: CUDA out of memory.\n"
    job = running_job(tmp_path, STEPS + IB_HEAD + SOCKET_WORKER + oom)
    node2 = dataclasses.replace(gpus(90.0), ip="10.0.0.2")
    write_snapshots(job, {"node1": gpus(90.0), "node2": node2}, [NOW - 10])
    report = check(job, RUNNING, Options(), now=NOW)
    kinds = {f.kind: f for f in report.findings}
    assert set(kinds) == {"nccl", "fatal"}
    assert "sockets (TCP) on node2 while node1" in kinds["nccl"].reason
    assert (kinds["fatal"].node, kinds["fatal"].severity) == ("node2", Severity.ERROR)
    assert kinds["fatal"].line is not None and "CUDA out of memory" in kinds["fatal"].line
    assert report.verdict == Verdict.UNHEALTHY


def test_the_newest_complete_checkpoint_is_named(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    checkpoints = tmp_path / "ckpt"
    for step in (100, 200, 300):
        (checkpoints / f"step_{step}").mkdir(parents=True)
    for step in (100, 200):
        (checkpoints / f"step_{step}" / "DONE").write_text("")
    report = check(job, RUNNING, Options(checkpoint_dir=checkpoints, checkpoint_marker="DONE"), now=NOW)
    assert report.checkpoint == str(checkpoints / "step_200")


def test_the_command_exits_with_the_verdict(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running_job(tmp_path)
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("FAILED", 1, "test"))
    result = raysub_cli("health", str(job.logs.path))
    assert result.code == 1, result.stderr
    assert result.stdout.startswith("job 4711: UNHEALTHY (Slurm: FAILED)\nstep 7, 0.5 steps/s\n")
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("PENDING", None, "test"))
    assert raysub_cli("health", "--json", str(job.logs.path)).code == 2
    bad = raysub_cli("health", "--step-regex", "step (\\d+)", str(job.logs.path))
    assert bad.code == 2 and "needs a group named 'step'" in bad.stderr
