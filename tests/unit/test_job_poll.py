"""Commands that poll ask Slurm at most once per 2 s; `logs --follow` still reads the files every 0.5 s and
checks ENDED on every poll."""

import types
from pathlib import Path

import pytest

from raysub import protocol
from raysub.jobs import Job
from raysub.protocol.logdir import LogDir
from raysub.slurm import SlurmState
from raysub.status import SLURM_MIN_INTERVAL, JobPoll
from tests.conftest import RunCli
from tests.unit.test_operator_cli import write_attempt


class FakeClock:
    """time.monotonic and time.sleep over a clock that only sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_job_poll_asks_slurm_at_most_once_per_interval(tmp_path: Path) -> None:
    job = Job("12", 0, LogDir(tmp_path))
    clock = FakeClock()
    asked: list[float] = []

    def ask(job_id: str) -> SlurmState:
        asked.append(clock.now)
        return SlurmState("COMPLETED" if clock.now >= 9 else "RUNNING")

    poll = JobPoll(job, clock=clock.monotonic, ask=ask)
    polls = 0
    while not poll.over():
        polls += 1
        clock.sleep(0.5)
    assert SLURM_MIN_INTERVAL == 2
    assert asked == [0, 2, 4, 6, 8, 10]
    assert polls == 20  # t = 0, 0.5, ..., 9.5: not over yet
    assert poll.slurm_state().state == "COMPLETED"


def test_ended_is_checked_on_every_poll_without_asking_slurm(tmp_path: Path) -> None:
    job = Job("12", 0, LogDir(tmp_path))
    clock = FakeClock()
    asked: list[float] = []

    def ask(job_id: str) -> SlurmState:
        asked.append(clock.now)
        return SlurmState("RUNNING")

    poll = JobPoll(job, clock=clock.monotonic, ask=ask)
    assert not poll.over()
    clock.sleep(0.5)
    job.logs.ended.write_text("driver exited with status 0\n")
    assert poll.over()
    assert asked == [0]


def test_logs_follow_reads_every_half_second_and_asks_slurm_every_two(
    raysub_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = write_attempt(tmp_path, "4711-logs", driver_done=False, joined=["node2"])
    head_log = logs / protocol.HEAD_LOG
    clock = FakeClock()
    asked: list[float] = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        with head_log.open("a") as f:
            f.write(f"at {clock.now:.1f}\n")

    def job_state(job_id: str) -> SlurmState:
        asked.append(clock.now)
        return SlurmState("COMPLETED" if clock.now >= 10 else "RUNNING", 0, "test")

    fake_time = types.SimpleNamespace(monotonic=clock.monotonic, sleep=sleep)
    monkeypatch.setattr("raysub.status.time", fake_time)
    monkeypatch.setattr("raysub.logs.time", fake_time)
    monkeypatch.setattr("raysub.slurm.job_state", job_state)
    result = raysub_cli("logs", "4711", "--log-dir", str(tmp_path), "--follow", "--head")
    assert result.code == 0, result.stderr
    assert set(clock.sleeps) == {0.5}
    assert asked == [0, 2, 4, 6, 8, 10]
    lines = result.stdout.splitlines()
    assert lines[:3] == ["head | head line 1", "head | head line 2", "head | at 0.5"]
    assert lines[-1] == "head | at 10.0"  # what was written before Slurm said the job was over
