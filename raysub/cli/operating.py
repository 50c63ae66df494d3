"""Operating a job: raysub status (where it stands), logs, attach (a shell on its nodes), monitor (what its
GPUs and CPUs do) and report (the same over time, as an HTML page)."""

from pathlib import Path

import click

from raysub import protocol
from raysub.cli.options import (
    find_job,
    find_jobs,
    follow_option,
    job_options,
    json_option,
    redraw_interval,
    step_regex_option,
    write_output,
)
from raysub.spec import JobSpec, Ports
from raysub.status import SLURM_MIN_INTERVAL


def deprecated_watch(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """status --watch, the name --follow had before raysub watch took the word: still works, says so."""
    if value:
        click.echo("raysub: warning: status --watch is now status --follow", err=True)
    return value


@click.command()
@job_options
@json_option("the status")
@follow_option("Redraw until the driver starts or the job ends.")
@click.option("--watch", is_flag=True, hidden=True, callback=deprecated_watch)
@redraw_interval(SLURM_MIN_INTERVAL, "Seconds between redraws.")
def status(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    as_json: bool,
    follow: bool,
    watch: bool,
    interval: float,
) -> None:
    """Show where JOB stands: Slurm's state, the bring-up phase, who joined, what is missing, why it ended.

    JOB is a job id (found from any directory: see --log-dir), a log directory, or nothing for the most
    recent job under --log-dir. An array job's id (sbatch --array) shows each of its tasks, one after
    another (with --json, a list); ID_TASK names one task. Each refresh asks Slurm once (squeue,
    then scontrol or sacct) and never runs srun.

    \b
    Example:
      raysub status 4711 --json
      raysub status 4712_3 --follow
    """
    from raysub import status as job_status

    follow = follow or watch
    try:
        found, array = find_jobs(job, base, attempt)
    except click.UsageError:
        queued = job_status.queued_status(job) if job and protocol.JOB_ID.fullmatch(job) else None
        if queued is None:
            raise
        click.echo(queued.to_json() if as_json else queued.describe())  # no LOG_DIR yet to follow
        return
    if array:
        if follow:
            raise click.UsageError(
                f"job {job} is an array of {len(found)} tasks; follow one: {found[0].job_id}"
            )
        tasks = [next(job_status.follow(task, interval, once=True)) for task in found]
        click.echo(
            job_status.Status.list_json(tasks) if as_json else "\n\n".join(t.describe() for t in tasks)
        )
        return
    for current in job_status.follow(found[0], interval, once=not follow):
        if as_json:
            click.echo(current.to_json())
            continue
        if follow:
            click.clear()
            click.echo(job_status.progress_bar(current.workers_joined, current.workers_expected))
        click.echo(current.describe())


@click.command()
@job_options
@click.option("--head", is_flag=True, help="The Ray head's log.")
@click.option("--driver", is_flag=True, help="The driver's log (and each restart's: driver1, driver2, ...).")
@click.option("--worker", type=int, metavar="K", help="Worker K's log (ray-worker-K.log).")
@click.option("--node", metavar="NAME", help="The log of the Ray node on Slurm node NAME.")
@click.option("--sandbox", is_flag=True, help="The sandbox logs.")
@click.option(
    "--ray",
    is_flag=True,
    help="Ray's own logs instead (raylet.out, gcs_server.out, the workers' .out/.err, ...), kept in "
    "LOG_DIR/ray-logs as each node left (--keep-ray-logs); tagged <node>/<file>. With --head, --worker "
    "or --node: that node's.",
)
@click.option(
    "--file",
    "name_glob",
    metavar="GLOB",
    help="With --ray: only the files whose name matches GLOB, e.g. raylet.out or 'worker-*.err'.",
)
@follow_option("Keep printing new lines (new files too) until the job ends.")
@click.option("--lines", "-n", type=click.IntRange(min=1), help="Only the last N lines of each log.")
@click.option("--grep", "pattern", metavar="RE", help="Only lines matching this regular expression.")
def logs(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    head: bool,
    driver: bool,
    worker: int | None,
    node: str | None,
    sandbox: bool,
    ray: bool,
    name_glob: str | None,
    follow: bool,
    lines: int | None,
    pattern: str | None,
) -> None:
    """Print JOB's logs as one stream, each line tagged: head, w00, w01, ..., sb0, driver.

    Without a choice of log, all of them: the head first, then the workers in order, the sandboxes and
    the driver. Works while the job runs and after it. With --ray, Ray's own logs of the nodes that
    have left, such as the raylet's of a node that died.

    \b
    Example:
      raysub logs 4711 --worker 3 -n 50
      raysub logs --follow --grep 'ERROR|Traceback'
      raysub logs 4711 --ray --node node3 --file raylet.out -n 20
    """
    import re

    from raysub.logs import Selection, follow_logs, no_ray_logs, not_in_job, ray_sources, show, sources
    from raysub.status import JobPoll

    if name_glob is not None and not ray:
        raise click.UsageError("--file picks among Ray's logs: give --ray with it")
    if ray and (follow or driver or sandbox):
        used = "--follow" if follow else "--driver" if driver else "--sandbox"
        raise click.UsageError(f"--ray shows Ray's logs kept as each node left: {used} does not apply")

    found = find_job(job, base, attempt)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as error:
        raise click.BadParameter(str(error), param_hint="'--grep'") from error
    selection = Selection(head=head, driver=driver, worker=worker, node=node, sandbox=sandbox)
    why = not_in_job(found, selection)
    if why:
        raise click.UsageError(why)
    if ray:
        kept = ray_sources(found, selection, name_glob)
        if not kept:
            raise click.ClickException(no_ray_logs(found.logs.path, name_glob))
        for line in show(kept, lines, regex):
            click.echo(line)
        return
    if not follow:
        for line in show(sources(found, selection), lines, regex):
            click.echo(line)
        return
    for line in follow_logs(found, selection, regex, JobPoll(found).over):
        click.echo(line)


@click.command(context_settings={"ignore_unknown_options": True})
@job_options
@click.option("--node", metavar="NAME", help="Attach to this node of the job.")
@click.option(
    "--worker",
    type=int,
    metavar="K",
    help="Attach to the node of worker K (the one writing ray-worker-K.log).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def attach(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    node: str | None,
    worker: int | None,
    command: tuple[str, ...],
) -> None:
    """Open a shell (or run COMMAND) on a node of running JOB: the head unless --node or --worker.

    Runs srun --overlap --jobid=JOB --pty on that node, with RAY_ADDRESS set and, for a job with
    --auth token, the path of its Ray token. In a job with --container-image the shell is in the head's
    running container on the head node, elsewhere in a new container from the job's image, with the
    job's mounts (docs/containers.md).

    \b
    Example:
      raysub attach 4711 --worker 1 -- nvidia-smi
      raysub attach
    """
    import os

    from raysub.attach import command as attach_argv
    from raysub.attach import ray_environment
    from raysub.jobs import JobNotFound

    found = find_job(job, base, attempt)
    try:
        argv = attach_argv(found, node, worker, list(command))
    except JobNotFound as error:
        raise click.UsageError(str(error)) from error
    os.execvpe(argv[0], argv, {**os.environ, **ray_environment(found)})  # noqa: S606 (srun takes the terminal)


def ssh_login(given: str | None) -> str:
    """USER@HOST for ssh: ``given``, with this user when it names none; by default this host, or inside a
    job the host it was submitted from (SLURM_SUBMIT_HOST)."""
    import getpass
    import os
    import socket

    login = given or os.environ.get("SLURM_SUBMIT_HOST") or socket.gethostname()
    return login if "@" in login else f"{getpass.getuser()}@{login}"


@click.command()
@job_options
@click.option(
    "--login-host",
    metavar="[USER@]HOST",
    help="The host your laptop reaches by ssh and that reaches the job's nodes; default you at this host "
    "(inside a job, at the host it was submitted from).",
)
@click.option(
    "--local-port",
    type=click.IntRange(1, 65535),
    default=Ports.dashboard,
    show_default=True,
    help="The laptop's end of the tunnel (Ray's default dashboard port, which ray job submit assumes).",
)
@json_option("the tunnel (address, ssh, url, header)")
def dashboard(
    job: str | None,
    base: Path | None,
    attempt: int | None,
    login_host: str | None,
    local_port: int,
    as_json: bool,
) -> None:
    """Say how to open running JOB's Ray dashboard from your laptop.

    Prints the ssh -L line that forwards a port of your laptop to the dashboard through the login node,
    the URL to open, and, for a job with --auth token, the header that carries its token (the page asks
    for the token once). The dashboard's port is the job's own with --ports block: ask for each job.

    \b
    Example:
      raysub dashboard 4711 --login-host alice@login.cluster.example
      raysub dashboard --json
    """
    from raysub.dashboard import NoDashboard, tunnel

    found = find_job(job, base, attempt)
    try:
        way = tunnel(found, ssh_login(login_host), local_port)
    except NoDashboard as error:
        raise click.ClickException(str(error)) from error
    click.echo(way.to_json() if as_json else way.describe())


@click.command()
@job_options
@follow_option("Redraw as new snapshots arrive, until the job ends.")
@click.option(
    "--live",
    is_flag=True,
    help="Ask every node's metrics endpoint now, not the last snapshot in metrics.jsonl.",
)
@redraw_interval(JobSpec.monitor_interval, "Seconds between redraws with --follow.")
def monitor(
    job: str | None, base: Path | None, attempt: int | None, follow: bool, live: bool, interval: float
) -> None:
    """Show each node's CPU and RAM and each GPU's utilisation and memory for JOB.

    Reads the last snapshot the job's monitor wrote to LOG_DIR/metrics.jsonl (render's --monitor, on by
    default). --live scrapes the nodes' Ray metrics endpoints instead, from the addresses in that file.
    A '?' is a reading Ray did not report, such as the utilisation of a GPU that does not expose it.

    \b
    Example:
      raysub monitor 4711
      raysub monitor --follow
      raysub monitor 4711 --live
    """
    import time

    from raysub.monitor import NoReadings, follow_readings, table

    found = find_job(job, base, attempt)
    try:
        for reading in follow_readings(found, live, interval, once=not follow):
            if follow:
                click.clear()
            click.echo(f"job {found.job_id}, {time.strftime('%H:%M:%S', time.localtime(reading.when))}")
            click.echo(table(reading.nodes, reading.failed))
    except NoReadings as error:
        raise click.UsageError(str(error)) from error


@click.command()
@job_options
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write.",
)
@step_regex_option
def report(
    job: str | None, base: Path | None, attempt: int | None, output: Path, step_regex: str | None
) -> None:
    """Write one self-contained HTML page of JOB: its training step and throughput over time, each node's
    bring-up and the driver's events on the same time axis, then its GPU, memory and CPU over time and
    their min/mean/max.

    The steps come from the trainer's own reports (raysub.trainer, docs/health.md) when it made any, else
    from the driver's log, read as raysub health reads them; the bring-up and the events
    (driver starts, restarts, its end, ENDED and its cause) from LOG_DIR/timeline.jsonl; stretches of 30
    min or more without a new step are shaded. Where the log's step lines carry no time, the steps are
    drawn against its lines. The charts per node and GPU come from LOG_DIR/metrics.jsonl. The page needs
    no network: no scripts, no fonts, nothing fetched; open it anywhere.

    \b
    Example:
      raysub report 4711 -o report.html
    """
    from raysub.report import job_report

    found = find_job(job, base, attempt)
    write_output(output, job_report(found, step_regex))
    click.echo(f"{output}: job {found.job_id} ({found.logs.path}) as charts")
