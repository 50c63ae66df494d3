"""Keeping a run going: raysub health (is the job healthy, and why not) and raysub watch (resubmit the job
until it succeeds)."""

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from raysub import slurm
from raysub.cli.options import (
    find_job,
    job_options,
    json_option,
    log_dir_option,
    progress_options,
    redraw_interval,
    seconds_option,
)
from raysub.health.options import Options
from raysub.watch_rules import BACKOFF_BASE, BACKOFF_MAX, INTERVAL, Backoff, Rules


@click.command()
@job_options
@json_option("the checkup")
@progress_options(
    "Stalled: the driver runs and has printed no new step and no new output for this long.",
)
@click.option(
    "--gpu-idle-threshold",
    type=click.FloatRange(min=0, min_open=True, max=100),
    default=Options.gpu_idle_threshold,
    show_default=True,
    metavar="PCT",
    help="GPU utilisation (%) below which a GPU counts as idle.",
)
@seconds_option(
    "--gpu-idle-after",
    Options.gpu_idle_after,
    "SECONDS",
    "Unhealthy when every GPU has been idle this long while the driver runs.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Where the driver saves checkpoints: the checkup names the newest complete one.",
)
@click.option("--checkpoint-marker", metavar="NAME", help="A checkpoint is complete once it holds this file.")
def health(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    as_json: bool,
    step_regex: str | None,
    stall_after: float,
    slow_step_limit: float | None,
    tensorboard_dir: Path | None,
    metrics_file: Path | None,
    gpu_idle_threshold: float,
    gpu_idle_after: float,
    checkpoint_dir: Path | None,
    checkpoint_marker: str | None,
) -> None:
    """Say whether JOB is healthy: Slurm's state, training progress and stalls, idle GPUs, each node's NCCL
    transport, fatal log lines (NCCL timeouts and errors, CUDA out of memory, lost Ray nodes, tracebacks),
    Ray's GPUs and CPUs in use, and the newest complete checkpoint.

    Exit status 0 healthy, 1 unhealthy, 2 cannot tell (queued, or nothing to go by). One Slurm query;
    everything else comes from LOG_DIR. Each finding names its node and the log line that shows it
    (docs/health.md says what each means and what to do).

    \b
    Example:
      raysub health 4711
      raysub health --json --checkpoint-dir /lustre/ckpt/run7 --stall-after 900
    """
    from raysub.health.checkup import check

    found = find_job(job, base, attempt)
    options = Options(
        step_regex,
        stall_after,
        gpu_idle_threshold,
        gpu_idle_after,
        checkpoint_dir,
        checkpoint_marker,
        slow_step_limit=slow_step_limit,
        tensorboard_dir=tensorboard_dir,
        metrics_file=metrics_file,
    )
    checkup = check(found, slurm.job_state(found.job_id), options)
    click.echo(checkup.to_json() if as_json else checkup.describe())
    sys.exit(int(checkup.verdict))


def exit_codes(ctx: click.Context, param: click.Parameter, value: str) -> frozenset[int]:
    """A comma-separated list of exit codes (0 to 255)."""
    codes = [part.strip() for part in value.split(",") if part.strip()]
    if not all(code.isdigit() and int(code) <= 255 for code in codes):
        raise click.BadParameter(f"{value!r} is not a comma-separated list of exit codes from 0 to 255")
    return frozenset(int(code) for code in codes)


def resubmissions(most: int, old_name: int | None) -> int:
    """--max-resubmissions, or what --max-restarts, its old name (hidden now), gave; not both."""
    if old_name is None:
        return most
    if click.get_current_context().get_parameter_source("max_resubmissions") is not ParameterSource.DEFAULT:
        raise click.UsageError("--max-restarts is the old name of --max-resubmissions: give only one of them")
    click.echo("raysub: warning: watch --max-restarts is now watch --max-resubmissions", err=True)
    return old_name


@click.command()
@click.argument("target", metavar="JOB_SCRIPT|JOB")
@click.option(
    "--max-resubmissions",
    type=click.IntRange(min=0),
    default=Rules.max_resubmissions,
    show_default=True,
    metavar="N",
    help="Submit the script again at most this many times.",
)
@click.option("--max-restarts", "max_restarts", type=click.IntRange(min=0), hidden=True)
@seconds_option(
    "--backoff",
    BACKOFF_BASE,
    "BASE",
    "Seconds before the first resubmission: BASE to 2*BASE, doubling with each one (half of it random).",
)
@seconds_option("--backoff-max", BACKOFF_MAX, "MAX", "The longest wait before a resubmission, in seconds.")
@progress_options(
    "Cancel and resubmit a job whose driver runs but has printed no new training step and no new output "
    "for this long (as raysub health sees it)."
)
@redraw_interval(INTERVAL, "Seconds between two questions to Slurm about the job.")
@click.option(
    "--no-retry-exit-codes",
    "no_retry",
    default="",
    metavar="LIST",
    callback=exit_codes,
    help="Exit codes of a failed job (comma-separated, e.g. 2,3) after which the run stops.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the driver saves checkpoints. Every job gets it in RAYSUB_CHECKPOINT_DIR, and its head "
    "sets RAYSUB_RESUME_FROM to the newest complete one in it each time a driver starts (a requeue "
    "too). Must exist, unless --create-checkpoint-dir.",
)
@click.option(
    "--checkpoint-marker",
    metavar="NAME",
    help="A checkpoint is complete only once it holds this file (as raysub render's option).",
)
@click.option(
    "--create-checkpoint-dir",
    is_flag=True,
    help="Make --checkpoint-dir when it does not exist: here, or, where this host cannot (a file system only "
    "the compute nodes mount), by each job's head.",
)
@click.option(
    "--max-excluded",
    type=click.IntRange(min=0),
    default=Rules.max_excluded,
    show_default=True,
    help="Leave at most this many nodes out of later jobs (sbatch --exclude) after a job named them as "
    "failed (a dead node, a failed GPU check, a node that never joined). 0: never.",
)
@seconds_option(
    "--quick-failure",
    Rules.quick_failure,
    "SECONDS",
    "A driver run that fails this soon after its own start fails quickly (the driver's earlier runs in "
    "the same allocation do not count); two jobs in a row that fail quickly end the run.",
)
@seconds_option(
    "--submit-retry-for",
    Rules.submit_retry_for,
    "SECONDS",
    "Keep trying a submission that fails (a controller that is down or slow) this long; such failures "
    "use up no --max-resubmissions.",
)
@seconds_option(
    "--sbatch-timeout",
    slurm.TIMEOUT,
    "SECONDS",
    "How long sbatch may take; then watch asks Slurm whether it queued the job anyway (by the comment "
    "it gives each submission) before submitting again.",
    above_zero=True,
)
@log_dir_option(
    "the directory the job is submitted from",
    "The base directory of the jobs' <jobid>-logs directories; the run's state, lock and log "
    "(<script name>.watch.json, .lock, .log) go there too.",
)
def watch(
    target: str,
    max_resubmissions: int,
    max_restarts: int | None,
    backoff: float,
    backoff_max: float,
    interval: float,
    no_retry: frozenset[int],
    stall_after: float,
    slow_step_limit: float | None,
    tensorboard_dir: Path | None,
    metrics_file: Path | None,
    step_regex: str | None,
    checkpoint_dir: Path | None,
    checkpoint_marker: str | None,
    create_checkpoint_dir: bool,
    max_excluded: int,
    quick_failure: float,
    submit_retry_for: float,
    sbatch_timeout: float,
    base: Path | None,
) -> None:
    """Submit JOB_SCRIPT and resubmit it until a job of it succeeds; or adopt JOB, a submitted job.

    When the job fails, times out, is preempted, loses a node, stalls (it is cancelled then) or is
    interrupted by the warning signal without its driver declaring the training finished, raysub watch
    waits a backoff and submits the script again, from the same directory, leaving out nodes the job
    named as failed. Each job resumes from the newest checkpoint in --checkpoint-dir when its driver
    starts. It stops when a job completes with exit code 0 (exit status 0), and gives up (exit status 1)
    after --max-resubmissions, on an exit code of --no-retry-exit-codes, when the driver fails within
    --quick-failure of its start in two jobs in a row, or when three jobs in a row never started their
    driver. Every decision is printed and logged; run it again and it resumes the run, watching the same
    job.

    \b
    Example:
      raysub render --nodes 4 -t 4:00:00 -- python train.py > job.sub
      raysub watch job.sub --checkpoint-dir ckpt --max-resubmissions 10
      raysub watch 4711 --no-retry-exit-codes 2
    """
    from raysub import watch as watching
    from raysub.health.checkup import stall_check
    from raysub.watch_files import WatchError

    most = resubmissions(max_resubmissions, max_restarts)
    try:
        found = watching.find_target(target)
        backoffs = Backoff(backoff, backoff_max)
        checkpoints = watching.Checkpoints.from_options(
            checkpoint_dir, checkpoint_marker, create_checkpoint_dir
        )
    except (WatchError, ValueError) as error:
        raise click.UsageError(str(error)) from error
    if checkpoints is not None and checkpoints.create:
        click.echo(f"raysub: cannot make {checkpoints.directory} here: each job's head makes it", err=True)
    rules = Rules(
        max_resubmissions=most,
        no_retry_exit_codes=no_retry,
        max_excluded=max_excluded,
        quick_failure=quick_failure,
        submit_retry_for=submit_retry_for,
    )
    settings = watching.Settings(
        rules=rules,
        backoff=backoffs,
        interval=interval,
        checkpoints=checkpoints,
        stalled=stall_check(
            Options(
                step_regex=step_regex,
                stall_after=stall_after,
                slow_step_limit=slow_step_limit,
                tensorboard_dir=tensorboard_dir,
                metrics_file=metrics_file,
            )
        ),
        submit_timeout=sbatch_timeout,
        echo=click.echo,
    )
    try:
        final = watching.run(found, base, settings)
    except WatchError as error:
        raise click.ClickException(str(error)) from error
    if not final.succeeded:
        sys.exit(1)
