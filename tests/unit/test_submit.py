"""raysub submit's pieces that need no Slurm: Slurm's pending reason in words, the stage line, what it
exits with, and that it refuses a script raysub validate would refuse before sbatch sees it."""

from pathlib import Path

import pytest

from raysub import slurm, submit
from raysub.slurm import SlurmState, squeue_state
from raysub.status import Phase, Status


def status(phase: str, **fields: object) -> Status:
    values: dict[str, object] = {
        "job_id": "7",
        "attempt": 0,
        "log_dir": "/x/7-logs",
        "slurm_state": "RUNNING",
        "phase": phase,
        "pending": None,
        "workers_joined": 0,
        "workers_expected": 0,
    }
    return Status(**{**values, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("line", "pending"),
    [
        (
            "PENDING|Priority|2026-11-28T07:00:00",
            "jobs of higher priority go first (Priority); expected to start 2026-11-28T07:00:00",
        ),
        ("PENDING|JobHeldUser|N/A", "held by you: scontrol release JOB (JobHeldUser)"),
        (
            "PENDING|QOSMaxGRESPerUser|N/A",
            "your QOS's limit on GPUs (GRES) in use at once is reached (QOSMaxGRESPerUser)",
        ),
        ("PENDING|SomethingNew|N/A", "reason SomethingNew"),
        ("RUNNING|None|2026-11-28T06:00:00", None),
    ],
)
def test_squeue_says_why_a_job_waits_in_words(line: str, pending: str | None) -> None:
    assert squeue_state(line).pending == pending


def test_a_queued_job_that_squeue_no_longer_knows_has_no_reason() -> None:
    assert SlurmState("COMPLETED", 0, "scontrol").pending is None


@pytest.mark.parametrize(
    ("current", "line"),
    [
        (
            status(Phase.QUEUED, pending="waiting for nodes to become free (Resources)"),
            "queued: waiting for nodes to become free (Resources)",
        ),
        (status(Phase.HEAD_STARTING), "head starting"),
        (
            status(
                Phase.WORKERS_JOINING,
                workers_joined=61,
                workers_expected=63,
                missing_nodes=["node017", "node040"],
            ),
            "workers 61/63 (missing node017, node040)",
        ),
        (
            status(
                Phase.WORKERS_JOINING,
                workers_joined=0,
                workers_expected=5,
                missing_nodes=[f"n{k}" for k in range(5)],
            ),
            "workers 0/5 (missing n0, n1, n2 and 2 more)",
        ),
        (status(Phase.DRIVER_RUNNING), "driver running"),
        (status(f"{Phase.FINISHED} 3", driver_exit_code=3), "finished with exit code 3"),
        (
            status(Phase.ENDED, ended="worker 1 on node2: ray start failed"),
            "ended: worker 1 on node2: ray start failed",
        ),
    ],
)
def test_one_line_says_where_the_job_stands(current: Status, line: str) -> None:
    assert submit.stage(current) == line


def test_wait_exits_with_the_drivers_code_else_slurms_else_one() -> None:
    assert submit.exit_status(status(f"{Phase.FINISHED} 3", driver_exit_code=3, exit_code=0)) == 3
    assert submit.exit_status(status(Phase.ENDED, exit_code=9)) == 9
    assert submit.exit_status(status(Phase.ENDED)) == 1


def test_a_copy_that_cannot_be_written_is_said_before_sbatch(tmp_path: Path) -> None:
    with pytest.raises(submit.SubmitError, match="cannot write /dev/full: No space left on device"):
        submit.sbatch("#!/bin/bash\ntrue\n", tmp_path, keep=Path("/dev/full"))


def test_a_script_that_fails_validation_never_reaches_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_sbatch(*args: object, **kwargs: object) -> str:
        raise AssertionError("sbatch ran")

    monkeypatch.setattr(slurm, "submit", no_sbatch)
    with pytest.raises(
        submit.SubmitError, match=r"does not pass raysub validate: job\.sub line 2: syntax error"
    ):
        submit.sbatch("#!/bin/bash\nif then\n", tmp_path)
