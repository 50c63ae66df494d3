"""The ``raysub`` command line: parses options, calls the library, prints.

Nothing here imports ray at module level, so ``raysub --help`` stays fast.
"""

import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import click
from click.core import ParameterSource

from raysub import __version__
from raysub import plan as planning
from raysub.node import smoke as smoke_test
from raysub.profiles import ProfileError, load_profile
from raysub.protocol import AuthMode, PreflightMode, UntrustedFile, smoke_report
from raysub.resume import checkpoint_dir_problem
from raysub.spec import JobSpec, Ports, Sandbox, SandboxNodes, SpecError, spec_from_options

# Built-in defaults come from the spec itself, so the command line and the library cannot disagree.
SPEC_DEFAULT = {f.name: f.default for f in fields(JobSpec)}
SANDBOX_DEFAULT = {f.name: f.default for f in fields(Sandbox)}

if TYPE_CHECKING:
    from raysub.jobs import Job

F = TypeVar("F", bound=Callable[..., Any])


def option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A click option that also reads its default from RAYSUB_<NAME> (e.g. RAYSUB_GPUS_PER_NODE)."""
    long = next(d for d in decls if d.startswith("--")).split("/")[0]
    kwargs.setdefault("envvar", "RAYSUB_" + long[2:].upper().replace("-", "_"))
    kwargs.setdefault("show_envvar", True)
    return click.option(*decls, **kwargs)


def spec_option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """An option whose built-in default is the JobSpec field of its name (--gpus-per-node: gpus_per_node)."""
    long = next(d for d in decls if d.startswith("--")).split("/")[0]
    kwargs.setdefault("default", SPEC_DEFAULT[long[2:].replace("-", "_")])
    return option(*decls, **kwargs)


def port_options(func: F) -> F:
    """One --<name>-port option per Ray port."""
    for name, field in reversed(Ports.__dataclass_fields__.items()):
        flag = f"--{name.replace('_', '-')}-port"
        func = option(flag, type=int, default=field.default, show_default=True, help=f"Ray's {name} port.")(
            func
        )
    return func


def size_options(func: F) -> F:
    """--tp, --pp, --dp, --cp and --dcp, each also under the spellings frameworks use (raysub.plan.SIZES)."""
    for size in reversed(planning.SIZES):
        func = option(*size.flags, size.name, type=int, metavar="N", help=f"{size.meaning} Default 1.")(func)
    return func


def apply_profile(ctx: click.Context, name: str | None) -> None:
    """Fill every option left at its built-in default from the profile; command line and env win."""
    if not name:
        return
    try:
        values, path = load_profile(name)
    except ProfileError as error:
        raise click.BadParameter(str(error), param_hint="'--profile'") from error
    params = {p.name: p for p in ctx.command.params if p.name}
    for key, value in values.items():
        param = params.get(key)
        if param is None or key in ("profile", "command"):
            raise click.BadParameter(
                f"{path}: profile {name!r} sets unknown option {key!r}", param_hint="'--profile'"
            )
        if ctx.get_parameter_source(key) is ParameterSource.DEFAULT:
            ctx.params[key] = param.type_cast_value(ctx, value)


@click.group(
    name="raysub", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, "-V", "--version", prog_name="raysub")
def cli() -> None:
    """Ray on Slurm: render an sbatch script that brings a Ray cluster up in seconds and fails loudly.

    \b
    Example:
      raysub render --nodes 4 --gpus-per-node 8 -- python train.py > job.sub
      raysub validate --strict job.sub && sbatch job.sub
    """


@cli.command(context_settings={"show_default": True})
@option(
    "--nodes",
    "-N",
    type=int,
    help="Nodes in the job (>= 1); the first runs the Ray head and the driver. Or give the parallel sizes "
    "below instead, and render computes it (raysub plan).",
)
@size_options
@spec_option(
    "--gpus-per-node",
    type=int,
    help="GPUs per node (0 allowed); Ray advertises this many.",
)
@spec_option(
    "--gpu-request/--no-gpu-request",
    help="Ask Slurm for the GPUs; --no-gpu-request for sites that give whole nodes without GPU GRES.",
)
@option("--cpus-per-task", type=int, help="CPUs for each node's Ray (also Ray's --num-cpus).")
@option("--partition", "-p", help="Slurm partition.")
@option("--account", "-A", help="Slurm account.")
@option("--time", "-t", help="Time limit, as sbatch takes it (30, 4:00:00, 1-12).")
@spec_option("--job-name", "-J", help="Slurm job name.")
@spec_option("--exclusive/--no-exclusive", help="Whole nodes for the job.")
@option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    help="Extra #SBATCH option, e.g. --qos=high (repeatable); not one raysub sets, e.g. --nodes or --time.",
)
@option(
    "--log-dir", help="Base directory of the job's LOG_DIR (<base>/<jobid>-logs); default the submit dir."
)
@option("--container-image", help="pyxis container image for the nodes; without it, the current environment.")
@option("--container-mounts", help="pyxis --container-mounts (LOG_DIR is always mounted).")
@option("--container-workdir", help="pyxis --container-workdir.")
@option(
    "--setup", help="Shell command run on every node before each ray start, e.g. 'source venv/bin/activate'."
)
@option("--env", "env", multiple=True, metavar="KEY=VALUE", help="Exported on every node and for the driver.")
@spec_option(
    "--ray-temp-dir",
    help="Ray's temp dir on each node; %j is the job id, %n the node name. Short: Ray's sockets live in it.",
)
@option(
    "--ray-start-arg",
    "ray_start_args",
    multiple=True,
    help="Extra 'ray start' option (repeatable); not one raysub sets, such as --temp-dir or --port.",
)
@port_options
@option(
    "--interface", help="Take each node's IP from this network interface; default the node name's address."
)
@option("--dedicated-head", is_flag=True, help="The head node advertises no GPUs, so no work lands there.")
@spec_option(
    "--head-retries",
    type=int,
    help="Extra attempts to start the Ray head.",
)
@spec_option(
    "--worker-retries",
    type=int,
    help="Extra attempts for each worker's ray start.",
)
@spec_option(
    "--head-timeout",
    type=int,
    help="Seconds for the head to become ready, per attempt.",
)
@spec_option(
    "--workers-timeout",
    type=int,
    help="Seconds for all workers to join once the head is up.",
)
@spec_option(
    "--requeue/--no-requeue",
    help="Let Slurm requeue the job; each attempt gets its own LOG_DIR.",
)
@option(
    "--signal-before",
    type=int,
    metavar="SECONDS",
    help="Have Slurm signal the job this long before its time limit (#SBATCH --signal=B:SIG@SECONDS).",
)
@spec_option(
    "--forward-signal",
    help="The signal passed on to the driver's process group (preemption or time-limit warning).",
)
@option("--sandbox-command", help="Sidecar command (e.g. a code-execution server) started on sandbox nodes.")
@option("--sandbox-port", type=int, help="Port the sandbox answers on once ready.")
@option("--sandbox-container", help="pyxis image for the sandbox.")
@option(
    "--sandbox-nodes",
    type=click.Choice(get_args(SandboxNodes)),
    default=SANDBOX_DEFAULT["nodes"],
    help="Sandbox on every node or the head.",
)
@option(
    "--sandbox-timeout",
    type=int,
    default=SANDBOX_DEFAULT["timeout"],
    help="Seconds for every sandbox to answer.",
)
@spec_option(
    "--auth",
    type=click.Choice(get_args(AuthMode)),
    help="Ray token authentication: a random per-job token in LOG_DIR/.ray-auth/token (0600) that every "
    "node, the driver and raysub's commands use. 'none' lets anyone who reaches the head run code as you.",
)
@spec_option(
    "--dashboard/--no-dashboard",
    help="Run Ray's dashboard (and its Jobs API) on the head.",
)
@option(
    "--dashboard-host",
    help="Address the dashboard binds to; default the head's cluster address (never 0.0.0.0 unless asked).",
)
@spec_option(
    "--log-mode",
    help="Mode of each LOG_DIR (octal), 0750 at most for the group: logs get its read bits; the token, "
    "signal files and scripts are always the owner's alone.",
)
@spec_option(
    "--monitor/--no-monitor",
    help="Record every node's GPU, CPU and memory into LOG_DIR/metrics.jsonl (see raysub monitor, report).",
)
@spec_option(
    "--monitor-interval",
    type=float,
    metavar="SECONDS",
    help="Seconds between the monitor's snapshots.",
)
@spec_option(
    "--gpu-idle-threshold",
    type=float,
    metavar="PCT",
    help="GPU utilisation (%) below which a GPU counts as idle.",
)
@spec_option(
    "--gpu-idle-after",
    type=int,
    metavar="SECONDS",
    help="Warn in timeline.jsonl when every GPU stays idle this long while the driver runs.",
)
@spec_option(
    "--preflight",
    type=click.Choice(get_args(PreflightMode)),
    help="Before Ray starts on a node, check its GPUs with nvidia-smi (raysub/node/preflight.py): a GPU "
    "held by another process, too little free memory, fewer GPUs than --gpus-per-node. warn: record "
    "and go on; fail: end the job naming node, GPU and process.",
)
@spec_option(
    "--min-free-gpu-mem",
    type=int,
    metavar="MIB",
    help="The preflight check's least free memory per GPU.",
)
@spec_option(
    "--wait-gpus",
    type=int,
    metavar="SECONDS",
    help="Give busy GPUs this long to free up before the preflight check decides.",
)
@spec_option(
    "--driver-restarts",
    type=int,
    metavar="N",
    help="Run the driver again, up to N times, when it exits non-zero while every node is still in "
    "the cluster: no queue wait, no new bring-up. A lost node still ends the job.",
)
@spec_option(
    "--restart-backoff",
    type=int,
    metavar="SECONDS",
    help="Wait before the first driver restart; doubled for each next one, at most 10 minutes.",
)
@spec_option(
    "--checkpoint-dir",
    metavar="DIR",
    help="Where the driver saves checkpoints: before each driver start the newest complete one is "
    "passed on in RAYSUB_RESUME_FROM, and {checkpoint} in COMMAND is replaced by it (docs/health.md).",
)
@spec_option(
    "--checkpoint-marker",
    metavar="NAME",
    help="A checkpoint is complete only once it holds this file (default: each layout's own sign).",
)
@spec_option(
    "--create-checkpoint-dir/--no-create-checkpoint-dir",
    help="Make --checkpoint-dir when it does not exist: here it need not exist, and the job makes it. "
    "Without this a missing directory is an error, here and in the job (a typo would start every "
    "attempt from scratch).",
)
@spec_option(
    "--early-driver/--no-early-driver",
    help="When COMMAND runs python, start it as soon as the head is up: its imports and ray.init run while "
    "the workers join, and ray.init returns only once the cluster is whole (docs/protocol.md). Other "
    "commands, jobs with --driver-restarts, --checkpoint-dir or a sandbox, and --no-early-driver start "
    "once the cluster is whole.",
)
@spec_option(
    "--smoke",
    is_flag=True,
    help="Instead of COMMAND, run raysub's smoke test as the driver: one actor per GPU (or node) placed "
    "and checked, and an all-reduce where torch is installed; LOG_DIR/smoke.json says how it went "
    "(docs/smoke.md).",
)
@option(
    "--profile", help="Take defaults from [profiles.NAME] in ./raysub.toml or ~/.config/raysub/raysub.toml."
)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout."
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def render(ctx: click.Context, /, output: Path | None, **values: Any) -> None:
    """Print an sbatch script that runs COMMAND as the driver of a Ray cluster on --nodes nodes.

    The head starts Ray on the first node; all other nodes join through ONE batched srun; the driver
    runs on the head once every GPU (or node, with --gpus-per-node 0) has joined, and the job exits
    with its status. COMMAND after -- is the driver's argv, delivered byte-exact. Without COMMAND the
    cluster stays up until the job ends and LOG_DIR gets attach.sh; with --smoke instead of COMMAND the
    driver is raysub's smoke test.

    Instead of --nodes, give the run's parallel sizes (--tp, --pp, --dp, --cp, --dcp, under any of the
    spellings listed): the job gets the nodes raysub plan computes for them, one more with
    --dedicated-head.

    Every option also reads RAYSUB_<OPTION> from the environment, then the --profile.

    \b
    Example:
      raysub render --nodes 4 --gpus-per-node 8 -p batch -t 4:00:00 -- python train.py --lr 3e-4 > job.sub
      raysub render --tp 8 --pp 2 --dp 4 --gpus-per-node 8 -- python train.py > job.sub
      sbatch job.sub
    """
    from raysub.render import render as render_script

    apply_profile(ctx, values.pop("profile"))
    values.update({k: v for k, v in ctx.params.items() if k in values})
    try:
        spec = spec_from_options(values)
        script = render_script(spec)
        problem = (
            spec.checkpoint_dir
            and not spec.create_checkpoint_dir
            and checkpoint_dir_problem(Path(spec.checkpoint_dir))
        )
        if problem:
            raise SpecError("--checkpoint-dir", problem)
    except SpecError as error:
        raise click.BadParameter(error.message, param_hint=f"'{error.option}'") from error
    if spec.plan is not None and spec.plan.warning:
        click.echo(f"raysub: warning: {spec.plan.warning}", err=True)
    if not spec.token_auth:
        click.echo(
            "raysub: warning: --auth none: anyone who can reach the head's ports can run code as you "
            "in this job (docs/security.md)",
            err=True,
        )
    if output is None:
        click.echo(script, nl=False)
    else:
        output.write_text(script)


@cli.command(context_settings={"show_default": True})
@size_options
@spec_option("--gpus-per-node", type=int, help="GPUs per node of the partition the run goes to.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(gpus_per_node: int, as_json: bool, **sizes: int | None) -> None:
    """Say how many GPUs and nodes a run with these parallel sizes needs.

    World size = tp x pp x max(dp, cp, dcp) GPUs; nodes = world size / --gpus-per-node, rounded up.
    Each size also takes the spellings of Megatron-LM, vLLM, SGLang, NeMo-RL, verl and TensorRT-LLM.
    On more than one node a tensor-parallel group must lie on one node or on whole nodes, and dp, cp
    and dcp must each divide the largest of them (exit status 2 and the option at fault otherwise).
    GPUs left unused on the last node are a warning (left_over_gpus in --json). Rules, and how sizes
    map onto each framework: docs/plan.md.

    \b
    Example:
      raysub plan --tp 8 --pp 2 --dp 4 --gpus-per-node 8
      raysub plan --tensor-model-parallel-size 4 --context-parallel-size 2 --dp 4 --json
      raysub render --tp 8 --pp 2 --dp 4 --gpus-per-node 8 -- python train.py > job.sub
    """
    try:
        result = planning.plan(gpus_per_node, **sizes)
    except planning.PlanError as error:
        raise click.BadParameter(error.message, param_hint=f"'{error.option}'") from error
    if result.warning:
        click.echo(f"raysub: warning: {result.warning}", err=True)
    click.echo(result.to_json() if as_json else result.describe())


@cli.command()
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--strict", is_flag=True, help="Fail when shellcheck is not installed.")
def validate(script: Path, strict: bool) -> None:
    """Check SCRIPT and every script it embeds with bash -n and shellcheck; exit 1 on any problem.

    The embedded scripts are extracted exactly as the job writes them into LOG_DIR, and problems
    name the embedded script and its line.

    \b
    Example:
      raysub render --nodes 2 -- python train.py > job.sub && raysub validate --strict job.sub
    """
    from raysub.validate import validate as check

    problems, checked = check(script, strict=strict)
    for problem in problems:
        click.echo(f"{script}: {problem}", err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{script}: ok ({len(checked)} scripts: {', '.join(checked)})")


def log_dir_option(default: str, help_text: str) -> Callable[[F], F]:
    """--log-dir of a command that reads jobs' LOG_DIRs: their base directory, as ``base``."""
    path = click.Path(file_okay=False, path_type=Path)
    return option("--log-dir", "base", type=path, show_default=default, help=help_text)


def job_options(func: F) -> F:
    """JOB and the options that find its LOG_DIR, shared by status, logs and attach."""
    func = click.option(
        "--attempt", type=int, help="Which attempt of a requeued job (0 = the first); default the newest."
    )(func)
    func = log_dir_option(
        "the current directory",
        "The base directory of the job's <jobid>-logs directories. A job id is looked for here, then in "
        "the current directory, the job index and Slurm's record of the job.",
    )(func)
    return click.argument("job", required=False)(func)


def redraw_interval(default: float, help_text: str) -> Callable[[F], F]:
    """--interval of a command that asks Slurm again and again (a redraw, a watch): at least 2 s, so
    watching never hammers Slurm."""
    return click.option(
        "--interval", type=click.FloatRange(min=2), default=default, show_default=True, help=help_text
    )


def find_job(job: str | None, base: Path | None, attempt: int | None) -> "Job":
    from raysub.jobs import JobNotFound, resolve

    try:
        return resolve(job, base, attempt)
    except JobNotFound as error:
        raise click.UsageError(str(error)) from error


@cli.command()
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@click.option("--watch", is_flag=True, help="Redraw until the driver starts or the job ends.")
@redraw_interval(2.0, "Seconds between redraws.")
def status(
    job: str | None, base: Path | None, attempt: int | None, as_json: bool, watch: bool, interval: float
) -> None:
    """Show where JOB stands: Slurm's state, the bring-up phase, who joined, what is missing, why it ended.

    JOB is a job id (found from any directory: see --log-dir), a log directory, or nothing for the most
    recent job under --log-dir. Each refresh asks Slurm once (squeue, then scontrol or sacct) and never
    runs srun.

    \b
    Example:
      raysub status 4711 --json
      raysub status --watch
    """
    from raysub import status as job_status

    for current in job_status.watch(find_job(job, base, attempt), interval, once=not watch):
        if as_json:
            click.echo(current.to_json())
            continue
        if watch:
            click.clear()
            click.echo(job_status.progress_bar(current.workers_joined, current.workers_expected))
        click.echo(current.describe())


@cli.command()
@job_options
@click.option("--head", is_flag=True, help="The Ray head's log.")
@click.option("--driver", is_flag=True, help="The driver's log (and each restart's: driver1, driver2, ...).")
@click.option("--worker", type=int, metavar="K", help="Worker K's log (ray-worker-K.log).")
@click.option("--node", metavar="NAME", help="The log of the Ray node on Slurm node NAME.")
@click.option("--sandbox", is_flag=True, help="The sandbox logs.")
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new lines (new files too) until the job ends."
)
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
    follow: bool,
    lines: int | None,
    pattern: str | None,
) -> None:
    """Print JOB's logs as one stream, each line tagged: head, w00, w01, ..., sb0, driver.

    Without a choice of log, all of them: the head first, then the workers in order, the sandboxes and
    the driver. Works while the job runs and after it.

    \b
    Example:
      raysub logs 4711 --worker 3 -n 50
      raysub logs --follow --grep 'ERROR|Traceback'
    """
    import re

    from raysub.logs import Selection, follow_logs, show
    from raysub.status import JobWatch

    found = find_job(job, base, attempt)
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as error:
        raise click.BadParameter(str(error), param_hint="'--grep'") from error
    selection = Selection(head=head, driver=driver, worker=worker, node=node, sandbox=sandbox)
    if not follow:
        for line in show(found, selection, lines, regex):
            click.echo(line)
        return
    for line in follow_logs(found, selection, regex, JobWatch(found).over):
        click.echo(line)


@cli.command(context_settings={"ignore_unknown_options": True})
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


@cli.command()
@job_options
@click.option("--follow", "-f", is_flag=True, help="Redraw as new snapshots arrive, until the job ends.")
@click.option(
    "--live",
    is_flag=True,
    help="Ask every node's metrics endpoint now, not the last snapshot in metrics.jsonl.",
)
@redraw_interval(5.0, "Seconds between redraws with --follow.")
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


@cli.command()
@job_options
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write.",
)
def report(job: str | None, base: Path | None, attempt: int | None, output: Path) -> None:
    """Write one self-contained HTML page of JOB's GPU, memory and CPU over time, and their min/mean/max.

    Charts per node and GPU from LOG_DIR/metrics.jsonl. The page needs no network: no scripts, no fonts,
    nothing fetched; open it anywhere.

    \b
    Example:
      raysub report 4711 -o report.html
    """
    from raysub.monitor import NoReadings, power_caps, snapshots
    from raysub.report import render_report

    found = find_job(job, base, attempt)
    try:
        recorded = snapshots(found)
    except NoReadings as error:
        raise click.UsageError(str(error)) from error
    output.write_text(render_report(f"raysub job {found.job_id}", recorded, power_caps(found)))
    click.echo(f"{output}: {found.logs.metrics} as charts")


def seconds_option(
    flag: str, default: float, metavar: str, help_text: str, above_zero: bool = False
) -> Callable[[F], F]:
    return click.option(
        flag,
        type=click.FloatRange(min=0, min_open=above_zero),
        default=default,
        show_default=True,
        metavar=metavar,
        help=help_text,
    )


def checked_step_regex(value: str | None) -> str | None:
    """--step-regex: a regular expression with a group named 'step'."""
    import re

    if value is None:
        return None
    try:
        groups = re.compile(value).groupindex
    except re.error as error:
        raise click.BadParameter(str(error), param_hint="'--step-regex'") from error
    if "step" not in groups:
        raise click.BadParameter(
            "needs a group named 'step', such as (?P<step>\\d+)", param_hint="'--step-regex'"
        )
    return value


def progress_options(stall_help: str) -> Callable[[F], F]:
    """--step-regex, --stall-after and --slow-step-limit: how a command reads the driver's progress (raysub
    health's checks)."""

    def decorate(func: F) -> F:
        func = click.option(
            "--slow-step-limit",
            type=click.FloatRange(min=1),
            metavar="SECONDS",
            help="A step that takes this long counts as stalled even while the driver keeps printing "
            "(before, from 3 median step times on, it is a slow_step warning). Default: 10 median step "
            "times, at least 2 hours.",
        )(func)
        func = click.option(
            "--stall-after",
            type=click.FloatRange(min=1),
            default=1800.0,
            show_default=True,
            metavar="SECONDS",
            help=stall_help,
        )(func)
        return click.option(
            "--step-regex",
            metavar="RE",
            help="How the driver's log shows a training step: a regular expression with a group named "
            "'step' (and optionally 'total'). Default: the forms verl, NeMo-RL, OpenRLHF, SkyRL, AReaL, "
            "Megatron, HF, Lightning, DeepSpeed, torchtitan and Ray Train print (docs/health.md).",
        )(func)

    return decorate


@cli.command()
@job_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@progress_options(
    "Stalled: the driver runs and has printed no new step and no new output for this long.",
)
@click.option(
    "--gpu-idle-threshold",
    type=click.FloatRange(min=0, min_open=True, max=100),
    default=5.0,
    show_default=True,
    metavar="PCT",
    help="GPU utilisation (%) below which a GPU counts as idle.",
)
@seconds_option(
    "--gpu-idle-after",
    600.0,
    "SECONDS",
    "Unhealthy when every GPU has been idle this long while the driver runs.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the driver saves checkpoints: the report names the newest complete one.",
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
    from raysub import slurm
    from raysub.health.report import Options, check

    found = find_job(job, base, attempt)
    options = Options(
        checked_step_regex(step_regex),
        stall_after,
        gpu_idle_threshold,
        gpu_idle_after,
        checkpoint_dir,
        checkpoint_marker,
        slow_step_limit=slow_step_limit,
    )
    report = check(found, slurm.job_state(found.job_id), options)
    click.echo(report.to_json() if as_json else report.describe())
    sys.exit(int(report.verdict))


@cli.command()
@click.option(
    "--nodes", type=click.IntRange(min=1), help="Nodes the cluster should have; default: those in Ray."
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0),
    help="GPUs each node should advertise; default: what each does. 0: one bundle per node, no GPUs.",
)
@click.option(
    "--head-gpus",
    type=click.IntRange(min=0),
    help="GPUs the head should advertise (0 for a job with --dedicated-head); default: --gpus-per-node.",
)
@click.option(
    "--strategy",
    type=click.Choice(smoke_test.STRATEGIES, case_sensitive=False),
    metavar="[" + "|".join(smoke_test.STRATEGIES) + "]",
    help="The placement group's strategy. Default: PACK for one bundle per GPU, as a training run's "
    "workers are placed; STRICT_SPREAD for one per node, the only strategy that guarantees it.",
)
@click.option(
    "--allreduce",
    type=click.Choice(smoke_test.ALLREDUCE_MODES),
    is_flag=False,
    flag_value="optional",
    help="Also all-reduce across the actors (NCCL on GPUs, else gloo) and measure the bandwidth; "
    "skipped where torch is missing, unless --allreduce=required.",
)
@click.option(
    "--allreduce-mib",
    type=click.FloatRange(min=0, min_open=True),
    default=smoke_test.ALLREDUCE_MIB,
    show_default=True,
    help="The all-reduce's size in MiB.",
)
@seconds_option(
    "--timeout",
    smoke_test.TIMEOUT_S,
    "SECONDS",
    "The longest any one wait may take: the placement, each round of calls to the actors.",
    above_zero=True,
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report (smoke.json's format) here; default: the job's LOG_DIR/smoke.json when run "
    "as a job's driver, else nowhere.",
)
def smoke(
    nodes: int | None,
    gpus_per_node: int | None,
    head_gpus: int | None,
    strategy: str | None,
    allreduce: str | None,
    allreduce_mib: float,
    timeout: float,
    output: Path | None,
) -> None:
    """Prove the running job's placement: one actor per GPU (or per node), each where it should be.

    Run it inside a job (raysub attach, where RAY_ADDRESS is set). It makes a placement group of one
    bundle per GPU (or per node with --gpus-per-node 0), starts an actor in each, and checks that every
    node and every GPU got exactly one and no two share a GPU; then removes the placement group and the
    actors. Prints where each actor ran. Exit status 0 when every check passed, 1 (with the reason) when
    one did not or Ray could not be reached, 2 for a usage error. raysub render --smoke makes it a job's
    driver (docs/smoke.md).

    \b
    Example:
      raysub attach 4711 -- raysub smoke --nodes 4 --gpus-per-node 8 --allreduce
      raysub smoke --gpus-per-node 0 -o smoke.json
    """
    options = smoke_test.Options(
        nodes, gpus_per_node, head_gpus, strategy and strategy.upper(), allreduce, allreduce_mib, timeout
    )
    report = smoke_test.smoke(options)
    click.echo(smoke_test.table(report))
    path = output or smoke_report.report_path(None)
    if path is not None:
        smoke_report.write_report(path, report)
    if not report.ok:
        click.echo(f"raysub: smoke test failed: {report.reason}", err=True)
        sys.exit(1)


def exit_codes(ctx: click.Context, param: click.Parameter, value: str) -> frozenset[int]:
    """A comma-separated list of exit codes (0 to 255)."""
    codes = [part.strip() for part in value.split(",") if part.strip()]
    if not all(code.isdigit() and int(code) <= 255 for code in codes):
        raise click.BadParameter(f"{value!r} is not a comma-separated list of exit codes from 0 to 255")
    return frozenset(int(code) for code in codes)


@cli.command()
@click.argument("target", metavar="JOB_SCRIPT|JOB")
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Submit the script again at most this many times.",
)
@seconds_option(
    "--backoff",
    60.0,
    "BASE",
    "Seconds before the first restart: BASE to 2*BASE, doubling with each restart (half of it random).",
)
@seconds_option("--backoff-max", 1800.0, "MAX", "The longest wait before a restart, in seconds.")
@progress_options(
    "Cancel and restart a job whose driver runs but has printed no new step and no new output for this "
    "long (as raysub health sees it)."
)
@redraw_interval(60.0, "Seconds between two questions to Slurm about the job.")
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
    default=4,
    show_default=True,
    help="Leave at most this many nodes out of later jobs (sbatch --exclude) after a job named them as "
    "failed (a dead node, a failed GPU check, a node that never joined). 0: never.",
)
@seconds_option(
    "--quick-failure",
    60.0,
    "SECONDS",
    "A driver run that fails this soon after its own start fails quickly (restarts in the allocation "
    "before it do not count); two jobs in a row that fail quickly end the run.",
)
@seconds_option(
    "--submit-retry-for",
    3600.0,
    "SECONDS",
    "Keep trying a submission that fails (a controller that is down or slow) this long; such failures "
    "use up no --max-restarts.",
)
@seconds_option(
    "--sbatch-timeout",
    30.0,
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
    max_restarts: int,
    backoff: float,
    backoff_max: float,
    interval: float,
    no_retry: frozenset[int],
    stall_after: float,
    slow_step_limit: float | None,
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
    after --max-restarts, on an exit code of --no-retry-exit-codes, when the driver fails within
    --quick-failure of its start in two jobs in a row, or when three jobs in a row never started their
    driver. Every
    decision is printed and logged; run it again and it resumes the run, watching the same job.

    \b
    Example:
      raysub render --nodes 4 -t 4:00:00 -- python train.py > job.sub
      raysub watch job.sub --checkpoint-dir ckpt --max-restarts 10
      raysub watch 4711 --no-retry-exit-codes 2
    """
    from raysub import watch as watching
    from raysub.health.report import Options, stall_check

    if checkpoint_dir is None and (checkpoint_marker or create_checkpoint_dir):
        raise click.UsageError("--checkpoint-marker and --create-checkpoint-dir need --checkpoint-dir")
    try:
        found = watching.find_target(target)
        backoffs = watching.Backoff(backoff, backoff_max)
        checkpoints = (
            watching.Checkpoints.checked(checkpoint_dir, checkpoint_marker, create_checkpoint_dir)
            if checkpoint_dir
            else None
        )
    except (watching.WatchError, ValueError) as error:
        raise click.UsageError(str(error)) from error
    if checkpoints is not None and checkpoints.create:
        click.echo(f"raysub: cannot make {checkpoints.directory} here: each job's head makes it", err=True)
    rules = watching.Rules(
        max_restarts=max_restarts,
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
                step_regex=checked_step_regex(step_regex),
                stall_after=stall_after,
                slow_step_limit=slow_step_limit,
            )
        ),
        submit_timeout=sbatch_timeout,
        echo=click.echo,
    )
    try:
        final = watching.run(found, base, settings)
    except watching.WatchError as error:
        raise click.ClickException(str(error)) from error
    if not final.succeeded:
        sys.exit(1)


def main(args: Sequence[str] | None = None) -> None:
    """Entry point: errors in how raysub was called are one line on stderr and exit status 2."""
    try:
        status = cli.main(args=args, prog_name="raysub", standalone_mode=False)
    except click.UsageError as error:
        click.echo(f"raysub: error: {error.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.Abort:
        click.echo("raysub: aborted", err=True)
        sys.exit(1)
    except UntrustedFile as error:  # a job's signal file that someone else could have written
        click.echo(f"raysub: error: {error}", err=True)
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)
