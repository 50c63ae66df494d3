"""What a raysub watch run does next, without any I/O: the run's state (what its state file keeps), its
rules, the backoff before a resubmission, and :func:`decide`, a pure function of the state and what Slurm
and the job's LOG_DIR say. raysub.watch carries the decisions out.
"""

import json
import random
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

from raysub.status import FINAL_STATES

# The state file's format. Older files still load: version 1 lacks the fields version 2 added, and both
# count resubmissions under their old name, OLD_RESUBMISSIONS (a watcher of an older raysub keeps its run).
STATE_VERSION = 3
OLD_RESUBMISSIONS = "restarts"
# Slurm states after which a job is over: raysub status's, and DEADLINE (sbatch --deadline passed).
OVER = FINAL_STATES | {"DEADLINE"}
# Over for a reason outside the driver: the same script will likely get further next time.
RETRY = frozenset({"TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})
# Over because the job failed: resubmitted unless the failure looks like one that will happen again.
FAILED = frozenset({"FAILED", "OUT_OF_MEMORY"})
# The outcome recorded for a job that watch cancelled because it stalled.
STALLED = "STALLED"
# The outcome recorded for a job Slurm stopped knowing before watch saw it end.
LOST = "LOST"
# The outcome recorded for a job whose driver exited 0 after the warning signal without declaring the
# training finished (docs/watch.md, "Interrupted or finished"): resubmitted, like a time limit.
INTERRUPTED = "INTERRUPTED"
# Why an attempt ended badly: its driver, or the bring-up before any driver started.
FAULT_DRIVER = "driver"
FAULT_BRING_UP = "bring-up"
# Seconds between two questions to Slurm about the job watched (--interval).
INTERVAL = 60.0
# The backoff's base and maximum in seconds (--backoff, --backoff-max).
BACKOFF_BASE = 60.0
BACKOFF_MAX = 1800.0


class Backoff:
    """How long to wait before a resubmission: exponential, with equal jitter, inside [base, maximum].

    Before resubmission ``attempt`` (0 for the first) the ceiling is ``base * 2 ** (attempt + 1)``, at
    most ``maximum``; the delay is drawn uniformly from the upper half of the ceiling and is never below
    ``base``. So the first resubmission waits base to 2·base, the second 2·base to 4·base, and so on up
    to maximum/2 to maximum. Half of each delay is fixed (a resubmission never follows a failure at once)
    and half random (watchers whose jobs a broken node took down together do not resubmit together).
    """

    def __init__(
        self, base: float = BACKOFF_BASE, maximum: float = BACKOFF_MAX, rng: random.Random | None = None
    ) -> None:
        if not 0 <= base <= maximum:
            raise ValueError(f"the backoff base ({base:g} s) must be from 0 to the maximum ({maximum:g} s)")
        self.base = base
        self.maximum = maximum
        self.rng = rng or random.Random()  # noqa: S311 (jitter, not cryptography)

    def delay(self, attempt: int) -> float:
        # Past 2**64 every ceiling is the maximum; the bound keeps the float finite.
        ceiling = min(self.maximum, self.base * 2.0 ** (min(max(attempt, 0), 64) + 1))
        return self.rng.uniform(max(self.base, ceiling / 2), ceiling)


@dataclass(frozen=True)
class Rules:
    """When a run stops short of success."""

    max_resubmissions: int = 5
    no_retry_exit_codes: frozenset[int] = frozenset()
    # A driver that fails this soon after it started failed "quickly"; two such jobs in a row end the run.
    quick_failure: float = 60.0
    # A job Slurm has not known for this long (no squeue, scontrol or sacct answer) ends the run.
    lost_after: float = 600.0
    # This many jobs in a row whose cluster never came up (no driver started) end the run.
    bring_up_failures: int = 3
    # Nodes named as failed are left out of later jobs, at most this many (sbatch --exclude).
    max_excluded: int = 4
    # Failed submissions are retried for this long (from the first failure of a row); they use up no
    # resubmission.
    submit_retry_for: float = 3600.0


class Next(StrEnum):
    """What the watcher does at ``next_action_at``."""

    SUBMIT = "submit"  # submit the job script
    POLL = "poll"  # ask Slurm about job_id
    NONE = "none"  # nothing: the run is over (see ``stopped``)


@dataclass
class Attempt:
    """One job of the run, as the history keeps it; times are epoch seconds."""

    job_id: str
    submitted_at: float | None = None  # None for a job watch adopted
    resume_from: str | None = None
    # The driver's start from its LOG_DIR's timeline.jsonl; for a job without a LOG_DIR that watch finds,
    # when watch first saw it RUNNING.
    started_at: float | None = None
    ended_at: float | None = None  # when watch saw it over
    outcome: str | None = None  # Slurm's final state, STALLED or LOST; None while the job is on
    exit_code: int | None = None
    quick: bool = False  # its last driver run failed within Rules.quick_failure of that run's start
    fault: str | None = None  # FAULT_DRIVER or FAULT_BRING_UP for a job that ended badly
    failed_nodes: list[str] = field(default_factory=list)  # nodes its LOG_DIR names as failed


@dataclass
class WatchState:
    """The run, as the state file keeps it: enough for a new watcher to go on where the last one was."""

    script: str
    workdir: str  # where sbatch runs: the jobs' submit directory
    job_id: str | None = None  # the job being watched; None while none is
    resubmissions: int = 0  # jobs submitted after the run's first (failed sbatch calls do not count)
    next_action: Next = Next.SUBMIT
    next_action_at: float | None = None
    stopped: str | None = None  # why the run is over
    succeeded: bool = False
    unknown_since: float | None = None  # since when Slurm has not known job_id
    watcher: str = ""  # pid@host of the watcher that wrote the file last
    excluded: list[str] = field(default_factory=list)  # nodes left out of every later job (--exclude)
    # The comment (sbatch --comment) of the submission under way: after an sbatch that failed or timed
    # out, Slurm is asked whether a job carries it before anything is submitted again.
    token: str | None = None
    # The copy of the script every submission submits, made at the run's start (raysub.watch_files).
    script_copy: str | None = None
    submit_failures: int = 0  # failed submissions in a row
    submit_failing_since: float | None = None
    history: list[Attempt] = field(default_factory=list)

    @property
    def current(self) -> Attempt | None:
        """The history's entry of the job being watched."""
        last = self.history[-1] if self.history else None
        return last if last is not None and last.job_id == self.job_id else None

    @property
    def previous(self) -> Attempt | None:
        """The job before the one being watched."""
        return self.history[-2] if self.current is not None and len(self.history) > 1 else None

    def to_json(self) -> str:
        return json.dumps({"version": STATE_VERSION, **asdict(self)}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "WatchState":
        """The state ``to_json`` wrote; ValueError when ``text`` is not one."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.pop("version", None) not in range(1, STATE_VERSION + 1):
            raise ValueError(f"not a raysub watch state of version 1 to {STATE_VERSION}")
        if OLD_RESUBMISSIONS in data:
            data["resubmissions"] = data.pop(OLD_RESUBMISSIONS)
        try:
            history = [Attempt(**entry) for entry in data.pop("history", [])]
            state = cls(**data, history=history)
            state.next_action = Next(state.next_action)
        except TypeError as error:
            raise ValueError(str(error)) from error
        return state

    def adopt(self, job_id: str, now: float) -> None:
        """Watch ``job_id`` (a job this run did not submit) from now on."""
        self.job_id = job_id
        self.history.append(Attempt(job_id))
        self.next_action, self.next_action_at = Next.POLL, now


class Do(StrEnum):
    WAIT = "wait"  # ask Slurm again after the interval
    RESUBMIT = "resubmit"  # back off, then submit the script again
    STOP = "stop"  # the run is over


@dataclass(frozen=True)
class Action:
    """What :func:`decide` says to do about the current job, and why."""

    do: Do
    reason: str
    cancel: bool = False  # scancel the job first (it stalled)
    outcome: str | None = None  # how the job ended, for the history; None while it is on
    succeeded: bool = False
    quick: bool = False
    fault: str | None = None


@dataclass(frozen=True)
class Seen:
    """What the job's LOG_DIR says, where watch found it (all unknown when it did not)."""

    started: float | None = None  # when the last driver run started (None: no driver started)
    ended: float | None = None  # when the driver ended
    interrupted: bool = False  # the warning signal reached the driver and it did not declare itself finished
    bring_up: bool = False  # the LOG_DIR is there and no driver ever started in it


def _resubmit(state: WatchState, rules: Rules, action: Action) -> Action:
    """``action`` (a resubmission), or a stop when no resubmissions are left."""
    most = rules.max_resubmissions
    if state.resubmissions >= most:
        reason = f"{action.reason}; no resubmissions left (--max-resubmissions {most})"
        return replace(action, do=Do.STOP, reason=reason)
    return replace(action, reason=f"{action.reason}; resubmission {state.resubmissions + 1} of {most}")


def _bring_up_row(state: WatchState) -> int:
    """How many jobs in a row before the current one never started their driver."""
    row = 0
    for attempt in reversed(state.history[:-1] if state.current is not None else state.history):
        if attempt.fault != FAULT_BRING_UP:
            break
        row += 1
    return row


def _failed(state: WatchState, slurm_state: str, exit_code: int | None, seen: Seen, rules: Rules) -> Action:
    code = f" with exit code {exit_code}" if exit_code is not None else ""
    what = f"job {state.job_id} {slurm_state}{code}"
    if seen.bring_up:
        what = f"{what} before its driver started"
        failed = Action(Do.RESUBMIT, what, outcome=slurm_state, fault=FAULT_BRING_UP)
        row = _bring_up_row(state) + 1
        if row >= rules.bring_up_failures:
            reason = f"{what}: {row} jobs in a row that never started their driver"
            return replace(failed, do=Do.STOP, reason=reason)
        return _resubmit(state, rules, failed)
    took = None if seen.started is None or seen.ended is None else seen.ended - seen.started
    quick = took is not None and took < rules.quick_failure
    failed = Action(Do.RESUBMIT, what, outcome=slurm_state, quick=quick, fault=FAULT_DRIVER)
    if exit_code is not None and exit_code in rules.no_retry_exit_codes:
        return replace(failed, do=Do.STOP, reason=f"{what}, which --no-retry-exit-codes lists")
    previous = state.previous
    if quick and previous is not None and previous.quick:
        reason = f"{what} within {rules.quick_failure:g} s of its driver's start, as did the job before"
        return replace(failed, do=Do.STOP, reason=f"{reason}: it will fail again")
    return _resubmit(state, rules, failed)


def decide(
    state: WatchState,
    slurm_state: str | None,
    exit_code: int | None,
    started: float | None,
    now: float,
    *,
    rules: Rules | None = None,
    stalled: bool = False,
    ended: float | None = None,
    seen: Seen | None = None,
) -> Action:
    """What to do about the job the run is watching (``state.job_id``), given Slurm's state of it (None
    when Slurm does not know it), its exit code (the driver's when known), when its last driver run
    started and, if known, ``ended``, when the driver ended (default ``now``); ``stalled`` when the stall
    check says so; ``seen``, what its LOG_DIR says (when given, its times win over ``started`` and
    ``ended``). Pure: the caller does what the action says."""
    rules = rules or Rules()
    seen = seen or Seen(started=started, ended=ended)
    seen = replace(seen, ended=now if seen.ended is None else seen.ended)
    job = f"job {state.job_id}"
    if slurm_state is None:
        since = now if state.unknown_since is None else state.unknown_since
        if now - since >= rules.lost_after:
            reason = (
                f"Slurm has not known {job} for {now - since:.0f} s: check it, then run raysub watch again"
            )
            return Action(Do.STOP, reason, outcome=LOST)
        return Action(Do.WAIT, f"Slurm does not know {job}")
    if slurm_state not in OVER:
        if stalled:
            stall = f"{job} stalled ({slurm_state}): cancelling it"
            return _resubmit(state, rules, Action(Do.RESUBMIT, stall, cancel=True, outcome=STALLED))
        return Action(Do.WAIT, f"{job} is {slurm_state}")
    if slurm_state == "COMPLETED" and not exit_code and seen.interrupted:
        reason = (
            f"{job} completed, but its driver exited 0 after the warning signal without declaring the "
            "training finished: interrupted"
        )
        return _resubmit(state, rules, Action(Do.RESUBMIT, reason, outcome=INTERRUPTED))
    if slurm_state == "COMPLETED" and not exit_code:
        return Action(Do.STOP, f"{job} completed", outcome=slurm_state, succeeded=True)
    if slurm_state in RETRY:
        return _resubmit(state, rules, Action(Do.RESUBMIT, f"{job} ended {slurm_state}", outcome=slurm_state))
    if slurm_state in FAILED or slurm_state == "COMPLETED":
        return _failed(state, slurm_state, exit_code, seen, rules)
    reason = f"{job} ended {slurm_state}, which raysub watch does not resubmit"
    return Action(Do.STOP, reason, outcome=slurm_state)
