"""Growing a running job: raysub grow (more nodes for its Ray cluster, as a job of their own) and raysub
shrink (their release)."""

from pathlib import Path

import click

from raysub.cli.options import find_job, job_options, json_option
from raysub.job.grow import DEFAULT_NODES
from raysub.timing import Timing


@click.command()
@job_options
@click.option("--nodes", "-N", "count", type=click.IntRange(min=1), default=DEFAULT_NODES, show_default=True,
              help="How many nodes the grow job brings.")  # fmt: skip
@click.option("--partition", "-p", help="The grow job's partition (a preemptible one, say); default Slurm's.")
@click.option("--time", "-t", help="The grow job's time limit; default the partition's.")
@click.option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    metavar="ARG",
    help="Another sbatch option for the grow job, one per use (--sbatch-arg=--qos=scavenger).",
)
def grow(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    count: int,
    partition: str | None,
    time: str | None,
    sbatch_args: tuple[str, ...],
) -> None:
    """Add nodes to JOB's running Ray cluster: a job of their own (a grow job) whose nodes run JOB's own
    worker script (its --setup, preflight and Ray options, with the environment JOB's steps have) and join
    JOB's Ray with its token. They carry the label raysub/job=<the grow job's id>, so that placement can
    choose or avoid them. A grow job's nodes leave Ray when it ends (scancel, its time limit, raysub
    shrink), without ending JOB; when JOB ends, its grow jobs end within seconds. Their logs are in JOB's
    LOG_DIR/grow/ (docs/elastic.md).

    \b
    Example:
      raysub grow 4711 --nodes 2 -p scavenger -t 2:00:00
    """
    from raysub.elastic import GrowError
    from raysub.elastic import grow as submit_grow
    from raysub.errors import SpecError
    from raysub.job.grow import Grow

    found = find_job(job, base, attempt)
    request = Grow(found.logs, count, partition, time, sbatch_args)
    try:
        job_id = submit_grow(found, request)
    except SpecError as error:
        raise click.BadParameter(error.message, param_hint=f"'{error.option}'") from error
    except GrowError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"grow job {job_id}: {count} node(s) for job {found.job_id} ({found.logs.path}/grow)")


@click.command()
@job_options
@click.option("--job", "job_ids", multiple=True, metavar="GROWJOB", help="A grow job to end, one per use.")
@click.option(
    "--nodes",
    "-N",
    "count",
    type=click.IntRange(min=1),
    help="End the newest grow jobs until this many nodes leave.",
)
@click.option(
    "--drain",
    type=click.FloatRange(min=0),
    default=Timing.grow_drain_s,
    show_default=True,
    metavar="SECONDS",
    help="How long a running grow job's nodes have to leave Ray through its drain (no new work there; what "
    "runs may finish) before scancel; 0: scancel at once.",
)
@click.option("--list", "only_list", is_flag=True, help="Only list JOB's grow jobs and their state.")
@json_option("the grow jobs")
def shrink(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    job_ids: tuple[str, ...],
    count: int | None,
    drain: float,
    only_list: bool,
    as_json: bool,
) -> None:
    """End grow jobs of JOB (raysub grow, --autoscale): the ones named with --job, else the newest until
    --nodes nodes leave, else all of them. A running one's nodes leave Ray through Ray's drain, as a
    preemption (Ray places nothing new there and records why they left), within --drain seconds; then
    its job ends. One still queued is cancelled. JOB goes on.

    \b
    Example:
      raysub shrink 4711 --nodes 2
      raysub shrink 4711 --job 4790 --drain 300
      raysub shrink 4711 --list
    """
    import json
    from dataclasses import asdict

    from raysub.elastic import GrowError, grow_jobs
    from raysub.elastic import shrink as end_grow_jobs

    found = find_job(job, base, attempt)
    try:
        listed = grow_jobs(found) if only_list else end_grow_jobs(found, job_ids, count, drain)
    except GrowError as error:
        raise click.ClickException(str(error)) from error
    if as_json:
        click.echo(json.dumps([asdict(grown) for grown in listed], indent=2))
        return
    verb = "" if only_list else "ended "
    for grown in listed:
        click.echo(f"{verb}grow job {grown.job_id}: {grown.nodes} node(s), {grown.state}")
    if not listed:
        click.echo(f"job {found.job_id} has no grow job{' to end' if not only_list else ''}")
