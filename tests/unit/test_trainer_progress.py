"""The trainer's own word on its step (raysub.trainer, raysub/protocol/trainer_progress.py) and how health and
watch's stall rule prefer it to the driver's text (raysub.health.stall.read_progress)."""

import json
import threading
import time
from pathlib import Path

import pytest

from raysub import protocol
from raysub.health.checkup import StallCheck
from raysub.health.options import Options
from raysub.health.stall import StepSources
from raysub.jobs import Job
from raysub.protocol import trainer_progress
from raysub.protocol.logdir import LogDir
from raysub.trainer import StepReporter


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def log_dir(tmp_path: Path) -> LogDir:
    path = tmp_path / "7-logs"
    path.mkdir(mode=0o750)
    return LogDir(path)


def test_a_report_is_written_whole_with_the_logs_mode(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    clock = Clock()
    reporter = StepReporter("hugging-face", logs.path, clock)
    assert reporter.report(12, total=100, seconds_per_step=2.5, throughput=3150, unit="tokens/s")
    report = trainer_progress.read(logs.path)
    assert report == trainer_progress.Report(
        1000.0, 12, 1000.0, 100, 2.5, (3150.0, "tokens/s"), "hugging-face"
    )
    assert (trainer_progress.path(logs.path).stat().st_mode & 0o777) == 0o640


def test_reports_are_written_at_most_once_a_second_and_the_last_is_never_lost(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    clock = Clock()
    reporter = StepReporter(log_dir=logs.path, clock=clock, write_every=60.0)
    reporter.report(1)
    clock.now += 0.5
    reporter.report(2)  # within the minute: held, and a timer will write it
    assert trainer_progress.read(logs.path).step == 1  # type: ignore[union-attr]
    assert reporter.timer is not None
    reporter.timer.cancel()
    reporter.flush()  # what the timer (or the exit) does
    report = trainer_progress.read(logs.path)
    assert report is not None and (report.step, report.since) == (2, 1000.5)


def test_the_timer_writes_the_held_report(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    reporter = StepReporter(log_dir=logs.path, write_every=0.05)
    reporter.report(1)
    reporter.report(2)
    written = threading.Event()
    for _ in range(100):
        report = trainer_progress.read(logs.path)
        if report is not None and report.step == 2:
            written.set()
            break
        written.wait(0.05)
    assert written.is_set()


def test_since_is_when_the_step_was_first_reported(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    clock = Clock()
    reporter = StepReporter(log_dir=logs.path, clock=clock, write_every=0)
    reporter.report(5)
    clock.now += 30
    reporter.report(5, seconds_per_step=4.0)
    report = trainer_progress.read(logs.path)
    assert report is not None and (report.t, report.since) == (1030.0, 1000.0)


def test_outside_a_job_nothing_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protocol.ENV_LOG_DIR, raising=False)
    assert StepReporter().report(3) is False


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"step": -1}, "step must be a whole number"),
        ({"step": 1.5}, "step must be a whole number"),
        ({"step": True}, "step must be a whole number"),
        ({"step": 1, "total": -2}, "total must be"),
        ({"step": 1, "seconds_per_step": 0}, "seconds_per_step must be"),
        ({"step": 1, "throughput": 10.0}, "together"),
        ({"step": 1, "throughput": 10.0, "unit": "it/s"}, "unit must be one of"),
        ({"step": 1, "throughput": float("nan"), "unit": "tokens/s"}, "throughput must be"),
    ],
)
def test_a_value_that_is_no_step_is_refused_naming_it(
    tmp_path: Path, args: dict[str, object], said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        StepReporter(log_dir=log_dir(tmp_path).path).report(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"step": "5", "t": 1}', '{"step": 5}', '{"t": 1}', '\udcff{"step": 1, "t": 2'],
)
def test_a_file_that_is_no_report_reads_as_none(tmp_path: Path, text: str) -> None:
    logs = log_dir(tmp_path)
    trainer_progress.path(logs.path).write_text(text, errors="surrogateescape")
    assert trainer_progress.read(logs.path) is None


def driver_log(logs: LogDir, text: str) -> None:
    logs.driver_log.write_text(text)
    logs.file(protocol.DRIVER_STARTED).write_text("")


def test_the_trainers_step_wins_over_the_drivers_text(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    driver_log(logs, "step 3/12 loss 1.0\n")
    seen, _, source = StepSources(Options()).read(logs, 2000.0)
    assert (seen.step if seen else None, source) == (3, "driver log")
    trainer_progress.write(
        logs.path, trainer_progress.Report(1990.0, 40, 1980.0, 100, None, None, "lightning")
    )
    seen, changed, source = StepSources(Options()).read(logs, 2000.0)
    assert seen is not None and (seen.step, seen.total, source) == (40, 100, "trainer (lightning)")
    assert changed is not None and changed >= 1990.0


def test_watchs_stall_rule_goes_by_the_trainers_step(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    driver_log(logs, "step 3/12\n")
    job = Job("7", 0, logs)
    check = StallCheck(Options(stall_after=600))
    now = time.time()  # the driver log's own time counts too
    trainer_progress.write(logs.path, trainer_progress.Report(now, 40, now, 100, None, None, "api"))
    assert check(job, now=now + 10) is None
    # The trainer says nothing more and neither does the driver: step 40 is the step that stalled.
    finding = check(job, now=now + 3600)
    assert finding is not None and finding.kind == "stall" and "after step 40" in finding.reason
    assert json.loads(logs.file(protocol.HEALTH_PROGRESS).read_text())["step"] == 40


def test_report_step_in_a_job_writes_and_its_last_report_is_flushed_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    logs = log_dir(tmp_path)
    code = "from raysub.trainer import report_step\nreport_step(1)\nreport_step(2, total=9)\n"  # 2: held
    env = {"PATH": "/usr/bin:/bin", protocol.ENV_LOG_DIR: str(logs.path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    report = trainer_progress.read(logs.path)
    assert report is not None and (report.step, report.total, report.source) == (2, 9, "api")


def test_the_history_keeps_a_step_every_ten_seconds_and_the_last_one(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    clock = Clock()
    reporter = StepReporter(log_dir=logs.path, clock=clock, write_every=0.0)
    for step in range(1, 26):
        clock.now += 1.0
        reporter.report(step)
    assert [report.step for report in trainer_progress.history(logs.path)] == [1, 11, 21]
    reporter.flush()  # the exit: the last step is kept
    assert [report.step for report in trainer_progress.history(logs.path)] == [1, 11, 21, 25]
    reporter.flush()
    assert len(trainer_progress.history(logs.path)) == 4  # not twice
    # The total's step is kept at once: an actor's reporter (Ray Train's controller) may never exit.
    reporter.report(30, total=30)
    assert trainer_progress.history(logs.path)[-1].step == 30
    assert (trainer_progress.history_path(logs.path).stat().st_mode & 0o777) == 0o640
    with trainer_progress.history_path(logs.path).open("a") as history:
        history.write('{"t": 1, "step": "x"}\nnot json\n')  # passed over
    assert len(trainer_progress.history(logs.path)) == 5
