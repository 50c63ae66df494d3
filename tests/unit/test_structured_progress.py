"""The step from what a trainer writes for machines (raysub/health/structured.py): TensorBoard event files as
tensorboardX writes them (the real writer, not bytes of ours) and JSON-lines metrics; and the order in which
health reads its sources (raysub.health.stall.StepSources)."""

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raysub import protocol
from raysub.health.checkup import StallCheck
from raysub.health.options import Options
from raysub.health.stall import StepSources
from raysub.health.structured import EventsTail, event_step, jsonl_step
from raysub.jobs import Job
from raysub.protocol import step_sources, trainer_progress
from raysub.protocol.logdir import LogDir

tensorboardX = pytest.importorskip(
    "tensorboardX", reason="tensorboardX writes the event files (pip install tensorboardX)"
)


def write_scalars(directory: Path, steps: range) -> None:
    writer = tensorboardX.SummaryWriter(str(directory))
    for step in steps:
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()


def test_the_newest_event_with_a_summary_gives_the_step(tmp_path: Path) -> None:
    write_scalars(tmp_path / "run", range(0, 40, 10))
    tail = EventsTail(tmp_path)
    found = tail.read()
    assert found is not None and found[0] == 30 and abs(found[1] - time.time()) < 600


def test_the_tail_reads_on_and_a_newer_run_takes_over(tmp_path: Path) -> None:
    write_scalars(tmp_path / "run1", range(5, 8))
    [events] = (tmp_path / "run1").iterdir()
    whole = events.read_bytes()
    with events.open("r+b") as file:
        file.truncate(len(whole) - 5)  # the last record still being written
    tail = EventsTail(tmp_path)
    assert tail.read()[0] == 6  # type: ignore[index]
    with events.open("r+b") as file:  # the same file grows: read on from where the tail stopped
        file.seek(0)
        file.write(whole)
    assert tail.offset > 0 and tail.read()[0] == 7  # type: ignore[index]
    write_scalars(tmp_path / "run2" / "version_0", range(2, 3))
    [newer] = (tmp_path / "run2" / "version_0").iterdir()
    os.utime(newer, (time.time() + 5, time.time() + 5))
    assert tail.read()[0] == 2  # type: ignore[index]


def test_a_record_cut_short_is_read_once_it_is_whole(tmp_path: Path) -> None:
    write_scalars(tmp_path, range(1, 4))
    [events] = tmp_path.iterdir()
    whole = events.read_bytes()
    events.write_bytes(whole[:-7])
    assert EventsTail(tmp_path).read() == EventsTail(tmp_path).read()  # the same, and no error
    assert EventsTail(tmp_path).read()[0] == 2  # type: ignore[index]
    events.write_bytes(whole)
    assert EventsTail(tmp_path).read()[0] == 3  # type: ignore[index]


def test_no_event_file_no_step(tmp_path: Path) -> None:
    assert EventsTail(tmp_path / "missing").read() is None
    assert EventsTail(tmp_path).read() is None


@given(st.binary(max_size=64))
def test_any_bytes_are_an_event_or_none_never_an_error(data: bytes) -> None:
    read = event_step(data)
    assert read is None or isinstance(read[0], int)


def test_json_lines_metrics_give_the_last_stated_step(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    lines = [
        {"num_updates": 645, "loss": 2.1},
        {"epoch": 3, "valid_loss": 1.9},  # no step key
        "not json",
        {"global_step": True},  # not a step
        {"train/global_step": 700, "lr": 1e-4},
        {"global_step": 720, "step": 3},  # global_step first
    ]
    metrics.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    assert jsonl_step(metrics) == 720
    assert jsonl_step(tmp_path / "missing.jsonl") is None


def log_dir(tmp_path: Path) -> LogDir:
    path = tmp_path / "7-logs"
    path.mkdir(mode=0o750)
    logs = LogDir(path)
    logs.driver_log.write_text("step 3/12 loss 1.0\n")
    logs.file(protocol.DRIVER_STARTED).write_text("")
    return logs


def test_sources_in_order_trainer_then_tensorboard_then_metrics_then_text(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"iteration": 9}\n')
    options = Options(tensorboard_dir=tmp_path / "tb", metrics_file=tmp_path / "m.jsonl")
    assert StepSources(Options()).read(logs, 100.0)[2] == "driver log"
    seen, _, source = StepSources(options).read(logs, 100.0)
    assert (seen.step if seen else None, source) == (9, "metrics file")
    write_scalars(tmp_path / "tb", range(20, 21))
    seen, _, source = StepSources(options).read(logs, 100.0)
    assert (seen.step if seen else None, source) == (20, "tensorboard")
    trainer_progress.write(logs.path, trainer_progress.Report(99.0, 21, 98.0))
    seen, _, source = StepSources(options).read(logs, 100.0)
    assert (seen.step if seen else None, source) == (21, "trainer (api)")


def test_watchs_stall_rule_goes_by_tensorboards_step(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    write_scalars(tmp_path / "tb", range(40, 41))
    check = StallCheck(Options(stall_after=600, tensorboard_dir=tmp_path / "tb"))
    job = Job("7", 0, logs)
    now = time.time()
    assert check(job, now=now) is None
    finding = check(job, now=now + 3600)
    assert finding is not None and "after step 40" in finding.reason


def test_the_sources_the_job_was_rendered_with_are_read_from_log_dir(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"iteration": 9}\n')
    write_scalars(tmp_path / "tb", range(20, 21))
    recorded = step_sources.Recorded(None, tmp_path / "tb", tmp_path / "m.jsonl")
    sources = StepSources(Options())
    assert sources.read(logs, 100.0)[2] == "driver log"  # not written yet: looked for again
    logs.file(protocol.STEP_SOURCES).write_text(str(recorded.text()))
    seen, _, source = sources.read(logs, 100.0)
    assert (seen.step if seen else None, source) == (20, "tensorboard")
    logs.file(protocol.STEP_SOURCES).write_text(str(replace(recorded, tensorboard_dir=None).text()))
    seen, _, source = StepSources(Options()).read(logs, 100.0)
    assert (seen.step if seen else None, source) == (9, "metrics file")
    # A command's own option wins over the recorded one.
    write_scalars(tmp_path / "own", range(30, 31))
    seen, _, source = StepSources(Options(tensorboard_dir=tmp_path / "own")).read(logs, 100.0)
    assert (seen.step if seen else None, source) == (30, "tensorboard")


def test_recorded_sources_that_are_none_are_passed_over(tmp_path: Path) -> None:
    logs = log_dir(tmp_path)
    record = {
        "step_regex": "(?P<step>a{99999999999})",
        "tensorboard_dir": "/tb\0x",
        "metrics_file": "m.jsonl",
    }
    logs.file(protocol.STEP_SOURCES).write_text(json.dumps(record))
    assert step_sources.read(logs.path) == step_sources.Recorded()
    assert StepSources(Options()).read(logs, 100.0)[2] == "driver log"
