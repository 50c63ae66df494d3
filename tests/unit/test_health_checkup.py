"""raysub health over LOG_DIRs written with the protocol's writers and recorded-format log lines (Slurm's
answer faked): each finding, the verdict and exit status, the stall and the slow step seen across checkups,
and the driver's log read from its tail as raysub watch reads it."""

import dataclasses
import json
import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest

from raysub import protocol
from raysub.health.checkup import Finding, Severity, StallCheck, Verdict, check, log_findings, stall_check
from raysub.health.options import Options
from raysub.health.stall import CARRY_MAX, DriverTail, median_step_time, step_times
from raysub.jobs import Job
from raysub.protocol import grow_jobs
from raysub.protocol.logdir import LogDir, NodeEntry, ProgressSeen
from raysub.protocol.metrics_log import snapshot_line
from raysub.protocol.readings import GpuMetrics, NodeMetrics
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
    logs = LogDir(tmp_path / "4711-logs")
    logs.path.mkdir()
    logs.write_node_map(
        [
            NodeEntry(protocol.ROLE_HEAD, 0, "node1"),
            NodeEntry(protocol.ROLE_WORKER, 0, "node2"),
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
    checkup = check(job, RUNNING, Options(), now=NOW)
    assert (checkup.verdict, checkup.findings, checkup.step, checkup.state) == (
        Verdict.HEALTHY,
        [],
        7,
        "RUNNING",
    )
    assert checkup.seconds_per_step == pytest.approx(2.0)
    assert checkup.resources == {"GPU": {"used": 8.0, "total": 8.0}}
    assert json.loads(checkup.to_json())["healthy"] is True


def test_a_step_that_does_not_move_is_a_stall_across_checkups(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    options = Options(stall_after=300)
    assert check(job, RUNNING, options, now=NOW).verdict == Verdict.HEALTHY  # first seen: step 7
    later = check(job, RUNNING, options, now=NOW + 301)
    assert later.verdict == Verdict.UNHEALTHY
    [stall] = later.findings
    assert (stall.kind, stall.severity) == ("stall", Severity.ERROR)
    assert stall.reason == "no new step after step 7 and no output for 311 s"
    assert stall.line is not None and stall.line.startswith("step:7 ")
    with job.logs.driver_log.open("a") as out:
        out.write("step:8 - actor/pg_loss:-0.01\n")
    assert check(job, RUNNING, options, now=NOW + 302).verdict == Verdict.HEALTHY  # it moved again
    assert stall_check(options)(job) is None


def test_a_driver_silent_from_the_start_is_stalled(tmp_path: Path) -> None:
    job = running_job(tmp_path, "loading the model\n")
    os.utime(job.logs.driver_log, (NOW - 2000, NOW - 2000))
    [stall] = check(job, RUNNING, Options(), now=NOW).findings
    assert stall.reason.startswith("no output from the driver for ")


# verl's console logger behind Ray's prefix, steps of 100 s; and a line vLLM prints during rollouts.
def verl_step(step: int) -> str:
    return f"(TaskRunner pid=12) step:{step} - actor/pg_loss:-0.004 - timing_s/step:100.0\n"


ROLLOUT = (
    "(WorkerDict pid=77, ip=10.0.0.2) INFO 01-20 10:11:12 [metrics.py:351] Avg prompt throughput: 0.0 "
    "tokens/s, Avg generation throughput: 2318.5 tokens/s, Running: 212 reqs, Pending: 0 reqs\n"
)


def append(job: Job, text: str, at: float, path: Path | None = None) -> None:
    """``text`` printed by the driver at ``at`` (the log's modification time)."""
    path = path or job.logs.driver_log
    with path.open("a") as out:
        out.write(text)
    os.utime(path, (at, at))


def steps_of_100_s(job: Job, checker: StallCheck) -> float:
    """Steps 1 to 5 printed and seen 100 s apart; returns when step 5 was seen."""
    for step in range(1, 6):
        append(job, verl_step(step), NOW + 100 * step)
        assert checker(job, now=NOW + 100 * step) is None
    return NOW + 500


def test_a_long_step_that_keeps_printing_is_slow_then_stalled_past_the_larger_limit(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    checker = StallCheck(Options(stall_after=300))
    seen = steps_of_100_s(job, checker)
    append(job, ROLLOUT, seen + 250)
    assert checker(job, now=seen + 250) is None  # not 3 median steps yet
    findings: list[Finding | None] = []
    for taken in range(400, 7200, 200):  # an evaluation, 2 hours long, printing all along
        append(job, ROLLOUT, seen + taken)
        findings.append(checker(job, now=seen + taken))
    assert {(f.kind, f.severity) if f else None for f in findings} == {("slow_step", Severity.WARNING)}
    first = findings[0]
    assert first is not None and first.line == verl_step(5).strip()
    assert first.reason == (
        "no new step after step 5 for 400 s, 4 times the median step time (100 s); a stall after 300 s "
        "without output, or at 7200 s"
    )
    append(job, ROLLOUT, seen + 7200)
    stall = checker(job, now=seen + 7200)  # the default limit: 2 hours (10 median steps are less)
    assert stall is not None and (stall.kind, stall.severity) == ("stall", Severity.ERROR)
    assert stall.reason == (
        "no new step after step 5 for 7200 s while the driver keeps printing: past the slow-step limit of "
        "7200 s, the median step time 100 s"
    )
    append(job, verl_step(6), seen + 7260)
    assert checker(job, now=seen + 7260) is None  # it moved after all


def test_the_slow_step_limit_is_an_option(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    checker = StallCheck(Options(stall_after=300, slow_step_limit=1500))
    seen = steps_of_100_s(job, checker)
    for taken in range(400, 1500, 200):
        append(job, ROLLOUT, seen + taken)
        finding = checker(job, now=seen + taken)
        assert finding is not None and finding.kind == "slow_step"
    append(job, ROLLOUT, seen + 1500)
    stall = checker(job, now=seen + 1500)
    assert stall is not None and stall.reason.startswith(
        "no new step after step 5 for 1500 s while the driver"
    )


def test_a_silent_driver_is_stalled_after_stall_after(tmp_path: Path) -> None:
    job = running_job(tmp_path, STEPS.replace(" - timing_s/step:2.0", ""))  # step 7 at NOW - 10, no rate
    checker = StallCheck(Options())
    assert checker(job, now=NOW) is None
    assert checker(job, now=NOW + 1780) is None
    stall = checker(job, now=NOW + 1790)
    assert stall == Finding(
        Severity.ERROR,
        "stall",
        "no new step after step 7 and no output for 1800 s",
        line="step:7 - actor/pg_loss:-0.01",
    )


def test_a_silent_driver_s_slow_step_is_a_warning_before_it_is_a_stall(tmp_path: Path) -> None:
    job = running_job(tmp_path)  # step 7 at NOW - 10, 2 s a step as verl says
    checker = StallCheck(Options())
    assert checker(job, now=NOW + 50) is None
    slow = checker(job, now=NOW + 100)
    assert slow is not None and (slow.kind, slow.severity) == ("slow_step", Severity.WARNING)
    assert slow.reason.startswith("no new step after step 7 for 110 s, 55 times the median step time (2 s);")
    stall = checker(job, now=NOW + 1790)
    assert stall is not None and (stall.kind, stall.severity) == ("stall", Severity.ERROR)


def test_before_the_first_step_only_silence_is_a_stall(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    checker = StallCheck(Options(stall_after=300))
    for minute in range(0, 4 * 60, 4):  # four hours of loading and compiling, printing
        line = "(TaskRunner pid=12) Loading safetensors checkpoint shards:  50% Completed | 4/8\n"
        append(job, line, NOW + 60 * minute)
        assert checker(job, now=NOW + 60 * minute) is None
    stall = checker(job, now=NOW + 60 * 236 + 300)
    assert stall is not None and stall.reason == "no output from the driver for 300 s"


def test_raysub_health_warns_of_a_slow_step_from_the_rate_the_log_states(tmp_path: Path) -> None:
    job = running_job(tmp_path)  # timing_s/step:2.0
    assert check(job, RUNNING, Options(), now=NOW).findings == []  # step 7 first seen
    append(job, ROLLOUT, NOW + 590)
    checkup = check(job, RUNNING, Options(), now=NOW + 600)
    [slow] = checkup.findings
    assert (slow.kind, slow.severity, checkup.verdict) == ("slow_step", Severity.WARNING, Verdict.UNHEALTHY)
    assert slow.reason.startswith("no new step after step 7 for 610 s, 305 times the median step time (2 s);")


def test_step_times_come_from_the_steps_seen_over_time() -> None:
    seen = [(5, 0.0), (6, 100.0), (3, 500.0), (4, 620.0), (10, 1220.0)]  # a restart went back to step 3
    assert step_times(seen) == [100.0, 120.0, 100.0]
    assert median_step_time(seen, stated=2.0) == 100.0  # measured beats the log's own time ...
    assert median_step_time(seen[:2], stated=2.0) == 2.0  # ... once there are three step times
    assert median_step_time(seen[:2], stated=None) == 100.0
    assert median_step_time([], stated=None) is None


def test_the_progress_memory_keeps_the_last_step_changes_and_reads_the_old_format(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    memory = logs.file(protocol.HEALTH_PROGRESS)
    memory.write_text('{"step": 7, "since": 1800000000.5}\n')  # as raysub health wrote it before
    assert logs.progress_seen() == ProgressSeen(7, 1800000000.5, ())
    steps = tuple((step, NOW + step) for step in range(100))
    logs.write_progress_seen(ProgressSeen(99, NOW + 99, steps))
    assert logs.progress_seen() == ProgressSeen(99, NOW + 99, steps[-protocol.PROGRESS_HISTORY :])
    assert len(memory.read_text()) < 2000
    memory.write_text('{"step": true, "since": 1, "steps": [[1, 2], ["x", 3], [4], 5, [6, null]]}')
    assert logs.progress_seen() == ProgressSeen(None, 1.0, ((1, 2.0),))
    memory.write_text("[1, 2]")
    assert logs.progress_seen() is None


def test_a_multi_gigabyte_log_is_read_from_its_tail_in_bounded_memory(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    with job.logs.driver_log.open("r+b") as log:  # 3 GiB that take no disk, then the run's last lines
        log.truncate(3 * 2**30)
        log.seek(0, os.SEEK_END)
        log.write(("\n" + "".join(ROLLOUT + verl_step(step) for step in range(1, 2001))).encode())
    os.utime(job.logs.driver_log, (NOW - 5, NOW - 5))
    tail = DriverTail()
    tracemalloc.start()
    try:
        seen, changed = tail.read(job.logs, NOW)
        append(job, ROLLOUT + verl_step(2001), NOW + 55)
        later, changed_later = tail.read(job.logs, NOW + 60)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen is not None and seen.step == 2000 and seen.line == verl_step(2000).strip()
    assert (changed, changed_later) == (NOW - 5, NOW + 60)  # a read that found new bytes counts as output
    assert later is not None and later.step == 2001
    assert tail.offset == job.logs.driver_log.stat().st_size
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"


def latest_step(tail: DriverTail) -> int | None:
    return tail.latest.step if tail.latest else None


def test_a_restarted_driver_s_log_is_read_afresh(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    checker = StallCheck(Options(stall_after=300))
    assert checker(job, now=NOW) is None
    [sources] = checker.tails.values()
    tail = sources.tail
    assert (tail.path, latest_step(tail)) == (job.logs.driver_log, 7)
    restart = job.logs.file(protocol.driver_log_name(1))
    append(job, "(TaskRunner pid=99) loading checkpoint from global_step_5\n", NOW + 60, restart)
    assert checker(job, now=NOW + 60) is None
    assert (tail.path, latest_step(tail)) == (restart, None)
    assert job.logs.progress_seen() == ProgressSeen(None, NOW + 60, ((7, NOW - 10),))
    append(job, verl_step(6), NOW + 120, restart)
    assert checker(job, now=NOW + 120) is None
    assert latest_step(tail) == 6


def test_a_truncated_or_replaced_log_is_read_afresh(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    tail = DriverTail()
    seen, _ = tail.read(job.logs, NOW)
    assert seen is not None and seen.step == 7
    job.logs.driver_log.write_text(verl_step(2))  # truncated, same file
    seen, _ = tail.read(job.logs, NOW + 60)
    assert seen is not None and seen.step == 2
    # another file in its place, longer than what was read: read from its start, not from the old offset
    new = job.logs.driver_log.with_name("new.log")
    new.write_text(verl_step(3) + ROLLOUT * 20)
    new.replace(job.logs.driver_log)
    seen, _ = tail.read(job.logs, NOW + 120)
    assert seen is not None and seen.step == 3


def tqdm_bar(step: int, total: int = 10_000) -> str:
    """verl's progress bar as tqdm redraws it, without ending the line."""
    filled = "█" * (10 * step // total)
    percent = 100 * step // total
    return f"\rTraining Progress: {percent:3d}%|{filled:<10}| {step}/{total} [1:02:03<4:05:06,  2.00s/it]"


def test_a_progress_bar_that_never_ends_its_line_is_followed_in_bounded_memory(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    tail = DriverTail()
    append(job, "(TaskRunner pid=12) " + tqdm_bar(1), NOW)
    seen, _ = tail.read(job.logs, NOW)
    assert seen is not None and (seen.step, seen.total, seen.seconds_per_step) == (1, 10_000, 2.0)
    append(job, "".join(tqdm_bar(step) for step in range(2, 5001)), NOW + 60)  # one line, 5000 redraws
    seen, _ = tail.read(job.logs, NOW + 60)
    assert seen is not None and (seen.step, seen.total) == (5000, 10_000)
    assert len(tail.carry) <= CARRY_MAX
    append(job, tqdm_bar(5001), NOW + 120)
    seen, _ = tail.read(job.logs, NOW + 120)
    assert seen is not None and seen.step == 5001


def test_what_progress_carries_from_line_to_line_holds_across_reads(tmp_path: Path) -> None:
    job = running_job(tmp_path, "")
    tail = DriverTail()
    # HF Trainer: its training bar, then (another read) an evaluation bar, neither with a description
    append(job, "\r 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]\n", NOW)
    assert latest_step(tail) is None and tail.read(job.logs, NOW)[0] is not None
    append(job, "\r 50%|█████     | 5/10 [00:02<00:02,  2.10it/s]\n", NOW + 60)
    seen, _ = tail.read(job.logs, NOW + 60)
    assert seen is not None and (seen.step, seen.total) == (120, 1000)
    # a line cut by a block-buffered write inside its step number is read once it is whole
    append(job, '{"step": 121, "loss": 1.234}\n{"step": 1', NOW + 120)
    assert latest_step(tail) == 120 and tail.read(job.logs, NOW + 120)[0] is not None
    assert latest_step(tail) == 121
    append(job, '22, "loss": 1.2}\n', NOW + 180)
    seen, _ = tail.read(job.logs, NOW + 180)
    assert seen is not None and (seen.step, seen.total) == (122, 1000)


def test_the_command_takes_a_slow_step_limit(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running_job(tmp_path)
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: RUNNING)
    written = time.time() - 100  # the command goes by the clock: step 7 was printed 100 s ago
    os.utime(job.logs.driver_log, (written, written))
    result = raysub_cli("health", "--slow-step-limit", "50", str(job.logs.path))
    assert result.code == 1, result.stderr
    finding = "error: no new step after step 7 for 1[0-9][0-9] s while the driver keeps printing: past the "
    assert re.search(finding + "slow-step limit of 50 s", result.stdout), result.stdout
    bad = raysub_cli("health", "--slow-step-limit", "0.5", str(job.logs.path))
    assert bad.code == 2 and "--slow-step-limit" in bad.stderr


@pytest.mark.parametrize(
    ("state", "verdict"),
    [("FAILED", Verdict.UNHEALTHY), ("NODE_FAIL", Verdict.UNHEALTHY), ("PENDING", Verdict.CANNOT_TELL),
     (None, Verdict.CANNOT_TELL), ("COMPLETING", Verdict.HEALTHY)],
)  # fmt: skip
def test_slurm_states(tmp_path: Path, state: str | None, verdict: Verdict) -> None:
    job = running_job(tmp_path)
    checkup = check(job, SlurmState(state), Options(), now=NOW)
    assert checkup.verdict == verdict
    assert checkup.state == {None: "UNKNOWN", "COMPLETING": "RUNNING"}.get(state, state)


@pytest.mark.parametrize(
    ("ended", "exit_code", "verdict"),
    [("driver exited with status 0", 0, Verdict.HEALTHY),
     ("driver exited with status 1", 1, Verdict.UNHEALTHY),
     ("worker 2 on node3: Ray exited with status 1", None, Verdict.UNHEALTHY),
     ("cancelled by Slurm (scancel, ...): the batch script got SIGTERM", None, Verdict.UNHEALTHY)],
)  # fmt: skip
def test_a_job_slurm_forgot_is_judged_by_how_log_dir_says_it_ended(
    tmp_path: Path, ended: str, exit_code: int | None, verdict: Verdict
) -> None:
    job = running_job(tmp_path)
    job.logs.ended.write_text(f"{ended}\n")
    if exit_code is not None:
        job.logs.write_driver_exit_code(exit_code)
    checkup = check(job, SlurmState(None), Options(), now=NOW)
    assert (checkup.state, checkup.verdict) == ("UNKNOWN", verdict)
    state = [f for f in checkup.findings if f.kind == "state"]
    if verdict == Verdict.UNHEALTHY:
        assert state == [
            Finding(Severity.ERROR, "state", f"the job ended without the driver's success: {ended}")
        ]
    else:
        assert state == []


def test_gpus_idle_while_the_driver_runs(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    times = [NOW - 600 + 10 * k for k in range(61)]
    write_snapshots(job, {"node1": gpus(0.0, 1.0, None)}, times)
    [idle] = check(job, RUNNING, Options(gpu_idle_after=600), now=NOW).findings
    assert (idle.kind, idle.severity) == ("gpu_idle", Severity.WARNING)
    assert idle.reason == "GPUs allocated but idle: all 2 GPUs of node1 below 5% for 600 s"
    assert idle.node == "node1"
    # a GPU whose utilisation is unknown is not idle; one busy GPU is not idle either
    write_snapshots(job, {"node1": gpus(None, None)}, times)
    assert check(job, RUNNING, Options(), now=NOW).findings == []
    write_snapshots(job, {"node1": gpus(0.0, 60.0)}, times)
    assert check(job, RUNNING, Options(), now=NOW).findings == []


def test_idle_gpus_on_some_nodes_are_named_with_how_long(tmp_path: Path) -> None:
    job = running_job(tmp_path, started=NOW - 1800)
    times = [NOW - 1790 + 10 * k for k in range(180)]
    nodes = {"node1": gpus(95.0, 90.0), "node2": gpus(0.0, 2.0), "node3": gpus(1.0, None)}
    write_snapshots(job, nodes, times)
    [idle] = check(job, RUNNING, Options(gpu_idle_after=600), now=NOW).findings
    assert idle.reason == (
        "GPUs allocated but idle on node2, node3 (3 GPUs): below 5% for 1790 s, every reading since the "
        "driver started, while the GPUs of 1 other node work"
    )
    assert idle.node is None


def test_idle_since_the_last_busy_reading(tmp_path: Path) -> None:
    job = running_job(tmp_path, started=NOW - 3600)
    busy = [NOW - 3590 + 10 * k for k in range(200)]  # until NOW - 1600
    idle = [NOW - 1590 + 10 * k for k in range(159)]
    with job.logs.metrics.open("w") as out:
        for t in busy + idle:
            record = json.loads(snapshot_line({"node1": gpus(80.0 if t in busy else 0.0)}, {}, []))
            record["t"] = t
            out.write(json.dumps(record) + "\n")
    [finding] = check(job, RUNNING, Options(gpu_idle_after=600), now=NOW).findings
    assert finding.reason == "GPUs allocated but idle: the GPU of node1 below 5% for 1590 s"


def test_json_is_versioned_with_progress_gpu_use_and_each_nodes_transport(tmp_path: Path) -> None:
    titan = "".join(
        f"[titan] 2026-02-24 19:46:{10 + 2 * k:02d},500 - root - INFO - step: {k}  loss:  7.6  "
        f"memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.69  mfu: 13.99%\n"
        for k in range(1, 5)
    )
    job = running_job(tmp_path, titan + IB_HEAD + SOCKET_WORKER)
    node2 = dataclasses.replace(gpus(40.0, 20.0), ip="10.0.0.2")
    write_snapshots(job, {"node1": gpus(90.0, 80.0), "node2": node2}, [NOW - 20, NOW - 10])
    checkup = check(job, RUNNING, Options(), now=NOW)
    assert "step 4, 2 s per step, 10,050 tokens/s/device\n" in checkup.describe()
    assert "GPU utilisation: 57.5% on average, 20% on the least busy GPU\n" in checkup.describe()
    data = json.loads(checkup.to_json())
    assert data["schema_version"] == 2
    assert (data["step"], data["total_steps"], data["seconds_per_step"]) == (4, None, 2.0)
    assert data["throughput"] == {"value": 10050.0, "unit": "tokens/s/device"}
    assert data["gpu_utilization"] == {"average": 57.5, "minimum": 20.0, "gpus": 4}
    assert data["nodes"] == {
        "node1": {"transport": "IB", "gpu_utilization": {"average": 85.0, "minimum": 80.0, "gpus": 2}},
        "node2": {"transport": "Socket", "gpu_utilization": {"average": 30.0, "minimum": 20.0, "gpus": 2}},
    }
    assert "steps_per_second" not in data


def test_json_gives_the_time_per_step_of_a_log_that_prints_seconds_per_iteration(tmp_path: Path) -> None:
    """Issue 27: a log that printed '4.1 s/it' (a space before the unit) gave health --json no rate."""
    job = running_job(tmp_path, "".join(f"Step {k}/100 | loss 1.234 | 4.1 s/it\n" for k in range(1, 4)))
    data = json.loads(check(job, RUNNING, Options(), now=NOW).to_json())
    assert (data["step"], data["total_steps"], data["seconds_per_step"]) == (3, 100, 4.1)


def test_a_node_on_sockets_among_ib_nodes_and_a_fatal_line_on_its_node(tmp_path: Path) -> None:
    oom = "(RayTrainWorker pid=77, ip=10.0.0.2) torch.OutOfMemoryError: CUDA out of memory.\n"
    job = running_job(tmp_path, STEPS + IB_HEAD + SOCKET_WORKER + oom)
    node2 = dataclasses.replace(gpus(90.0), ip="10.0.0.2")
    write_snapshots(job, {"node1": gpus(90.0), "node2": node2}, [NOW - 10])
    checkup = check(job, RUNNING, Options(), now=NOW)
    kinds = {f.kind: f for f in checkup.findings}
    assert set(kinds) == {"nccl", "fatal"}
    assert "sockets (TCP) on node2 while node1" in kinds["nccl"].reason
    assert (kinds["fatal"].node, kinds["fatal"].severity) == ("node2", Severity.ERROR)
    assert kinds["fatal"].line is not None and "CUDA out of memory" in kinds["fatal"].line
    assert checkup.verdict == Verdict.UNHEALTHY


def test_the_newest_complete_checkpoint_is_named(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    checkpoints = tmp_path / "ckpt"
    for step in (100, 200, 300):
        (checkpoints / f"step_{step}").mkdir(parents=True)
    for step in (100, 200):
        (checkpoints / f"step_{step}" / "DONE").write_text("")
    checkup = check(job, RUNNING, Options(checkpoint_dir=checkpoints, checkpoint_marker="DONE"), now=NOW)
    assert checkup.checkpoint == str(checkpoints / "step_200")


def test_checkpoints_of_several_runs_are_a_warning(tmp_path: Path) -> None:
    job = running_job(tmp_path)
    for run in ("run_a", "run_b"):
        (tmp_path / "ckpt" / run / "step_100").mkdir(parents=True)
        (tmp_path / "ckpt" / run / "step_100" / "training_info.json").write_text("{}")
    checkup = check(job, RUNNING, Options(checkpoint_dir=tmp_path / "ckpt"), now=NOW)
    [finding] = [f for f in checkup.findings if f.kind == "checkpoint"]
    assert finding.severity == Severity.WARNING
    expected = f"{tmp_path / 'ckpt'}: complete checkpoints in 2 directories (run_a, run_b)"
    assert finding.reason.startswith(expected)
    assert checkup.checkpoint is None


def test_the_command_exits_with_the_verdict(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running_job(tmp_path)
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("FAILED", 1, "test"))
    result = raysub_cli("health", str(job.logs.path))
    assert result.code == 1, result.stderr
    assert result.stdout.startswith("job 4711: UNHEALTHY (Slurm: FAILED)\nstep 7, 2 s per step\n")
    monkeypatch.setattr("raysub.slurm.job_state", lambda job_id: SlurmState("PENDING", None, "test"))
    assert raysub_cli("health", "--json", str(job.logs.path)).code == 2
    bad = raysub_cli("health", "--step-regex", "step (\\d+)", str(job.logs.path))
    assert bad.code == 2 and "has no group named 'step'" in bad.stderr


def lightning_bar(epoch: int, step: int) -> str:
    return f"Epoch {epoch}:  50%|█████     | {step}/500 [00:10<00:10,  2.00it/s, v_num=0]\n"


def test_a_count_of_a_later_epoch_makes_the_step_unknown_not_stale(tmp_path: Path) -> None:
    job = running_job(tmp_path, "".join(lightning_bar(0, step) for step in (498, 499, 500)))
    tail = DriverTail()
    tail.read(job.logs, NOW)
    assert latest_step(tail) == 500
    append(job, lightning_bar(1, 3), NOW + 5)
    found, _ = tail.read(job.logs, NOW + 5)
    # Not 500 (stale: a stall to the stall rule) and not 3 (epoch 1's count, not the run's).
    assert found is None and tail.unknown is not None and "one epoch" in tail.unknown
    checkup = check(job, RUNNING, Options(), now=NOW + 5)
    assert checkup.step is None
    assert json.loads(checkup.to_json())["step_unknown"] == tail.unknown
    assert f"step unknown: {tail.unknown}" in checkup.describe()
    append(job, lightning_bar(1, 4) + verl_step(504), NOW + 6)  # another counter: the run's step
    tail.read(job.logs, NOW + 6)
    assert latest_step(tail) == 504 and tail.unknown is None


def test_the_step_pattern_the_job_was_rendered_with_is_read_from_log_dir(tmp_path: Path) -> None:
    job = running_job(tmp_path, "it 6 done\nit 7 done\n")
    assert check(job, RUNNING, Options(), now=NOW).step is None  # no default form reads it
    job.logs.file(protocol.STEP_SOURCES).write_text(json.dumps({"step_regex": r"it (?P<step>\d+) done"}))
    assert check(job, RUNNING, Options(), now=NOW).step == 7
    # A command's own --step-regex wins over it.
    assert check(job, RUNNING, Options(step_regex=r"it (?P<step>\d)"), now=NOW).step == 7
    assert check(job, RUNNING, Options(step_regex=r"(?P<step>6) done"), now=NOW).step == 6
    job.logs.file(protocol.STEP_SOURCES).write_text(json.dumps({"step_regex": r"it (\d+) done"}))  # no 'step'

    assert check(job, RUNNING, Options(), now=NOW).step is None


# Ray's GCS line for a node whose heartbeats stopped, as src/ray/gcs/gcs_node_manager.cc writes it (Ray 2.60;
# Ray printed it to the driver of tests/slurm/test_grow.py for a grow job ended by a plain scancel). Before
# Ray named the node it said "and ip: 10.4.4.107" (ray-project/ray#15128); that form names no host.
MARKED_DEAD = (
    "(raylet) The node with node id: 8cb909f5b4ad41f7b56814545541ef3ea75a5930dfa11ec1801d5749 and address: "
    "198.18.0.14 and node name: {host} has been marked dead because the detector has missed too many "
    "heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) "
)


def test_a_grow_nodes_death_is_a_warning_and_the_jobs_own_node_an_error(tmp_path: Path) -> None:
    logs = LogDir.of(tmp_path, 4711)
    logs.path.mkdir()
    grow_jobs.write(logs.path, grow_jobs.GrowMark("4790", 1, "grow", time.time()))
    (logs.path / protocol.GROW_DIR / "4790").mkdir()
    (logs.path / protocol.GROW_DIR / "4790" / "worker-0.log").write_text(
        "23:19:50 raysub worker 0 on node4: joining 198.18.0.11:6379\n"
    )
    text = "\n".join(MARKED_DEAD.format(host=host) for host in ("node4", "node2"))
    found = list(log_findings({"node1": text}, {}, False, grow_jobs.all_hosts(logs.path)))
    assert [(f.severity, f.kind) for f in found] == [(Severity.WARNING, "grow"), (Severity.ERROR, "fatal")]
    assert found[0].reason.startswith("node4, a grow job's node, left Ray without Ray's drain")
    assert [f.kind for f in log_findings({"node1": text}, {}, False)] == ["fatal", "fatal"]
