"""Authoring a job: raysub render (the batch script), raysub plan (the nodes a run needs) and raysub validate
(the script's bash, checked)."""

import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, get_args

import click
from click.core import ParameterSource

from raysub import plan as planning
from raysub.autoscale import DEFAULT_IDLE_S, DEFAULT_QUEUE_TIMEOUT_S
from raysub.cli.options import (
    F,
    complete_profile,
    json_option,
    option,
    size_options,
    spec_option,
    write_output,
)
from raysub.job.view import LARGE_SCALE
from raysub.profiles import ProfileError, load_profile
from raysub.protocol import AuthMode, PreflightMode
from raysub.protocol.logdir import LogDir
from raysub.spec import (
    LARGE_SCALE_NODES,
    PORT_BLOCK_SIZE,
    SANDBOX_FIXED_PORT,
    JobSpec,
    Ports,
    PortsMode,
    Sandbox,
    SandboxNodes,
    ScaleMode,
    SpecError,
    spec_from_options,
)

SANDBOX_DEFAULT = {f.name: f.default for f in fields(Sandbox)}


def port_options(func: F) -> F:
    """One --<name>-port option per Ray port."""
    for name, field in reversed(Ports.__dataclass_fields__.items()):
        flag = f"--{name.replace('_', '-')}-port"
        func = option(
            flag,
            type=int,
            default=field.default,
            show_default=True,
            help=f"Ray's {name} port (--ports fixed).",
        )(func)
    return func


def apply_profile(ctx: click.Context, name: str | None) -> None:
    """Fill every option left at its built-in default from the profile; command line and env win."""
    if not name:
        return
    try:
        values, path = load_profile(name)
    except ProfileError as error:
        raise click.BadParameter(str(error), param_hint="'--profile'") from error
    params = profile_keys(ctx.command)
    for key, value in values.items():
        param = params.get(key)
        if param is None or param.name is None:
            raise click.BadParameter(
                f"{path}: profile {name!r} sets unknown option {key!r}", param_hint="'--profile'"
            )
        if ctx.get_parameter_source(param.name) is not ParameterSource.DEFAULT:
            continue
        given = value
        if isinstance(value, str) and value.startswith("~"):
            value = str(Path(value).expanduser())
        if param.multiple and not isinstance(value, list):
            value = [value]
        try:
            ctx.params[param.name] = param.process_value(ctx, value)
        except (click.BadParameter, TypeError, ValueError) as error:
            why = error.message if isinstance(error, click.BadParameter) else f"not {param.type.name}"
            where = f"{path}: profiles.{name}.{key.replace('_', '-')}"
            raise click.BadParameter(f"{where} = {given!r}: {why}", param_hint="'--profile'") from error


def profile_keys(command: click.Command) -> dict[str, click.Parameter]:
    """The options a profile may set, by each of their long names with _ for - (sbatch_arg) and by their
    parameter names (sbatch_args); never --profile itself, nor the COMMAND argument."""
    keys: dict[str, click.Parameter] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in (None, "profile"):
            continue
        for flag in [param.name, *param.opts]:
            if flag.startswith("--") or not flag.startswith("-"):
                keys[flag.removeprefix("--").replace("-", "_")] = param
    return keys


@click.command(context_settings={"show_default": True})
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
    "--array",
    metavar="SPEC",
    help="An array job (sbatch --array syntax: 0-7, 1,3,5, 0-15%4): every task its own Ray cluster on its "
    "own nodes, with its own LOG_DIR (<array job id>_<task id>-logs; SLURM_ARRAY_TASK_ID tells the driver "
    "which task it is). raysub status ID lists the tasks; ID_TASK names one.",
)
@option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    help="Extra #SBATCH option, e.g. --qos=high; not one raysub sets, e.g. --nodes or --time.",
)
@option(
    "--log-dir", help="Base directory of the job's LOG_DIR (<base>/<jobid>-logs); default the submit dir."
)
@option(
    "--private-log-dir",
    metavar="DIR",
    help="Where LOG_DIR goes when the --log-dir base (default the submit dir), or a directory above it, "
    "lets someone else rename what it holds (a group-writable project directory without the sticky bit): "
    "DIR/<jobid>-logs, said in the job's output. Without it such a job does not start. E.g. "
    "~/raysub-logs on a home every node mounts (~ is your home where you render).",
)
@option(
    "--srun-arg",
    "srun_args",
    multiple=True,
    help="Extra option for every job step's srun, e.g. --cpu-bind=none; not one raysub sets, e.g. --nodes.",
)
@option(
    "--mpi", metavar="TYPE", help="srun --mpi of every job step, e.g. pmix (as ray.sub); default Slurm's."
)
@option("--container-image", help="pyxis container image for the nodes; without it, the current environment.")
@option("--container-mounts", help="pyxis --container-mounts (LOG_DIR is always mounted).")
@option(
    "--container-workdir",
    help="Where the containers start (pyxis --container-workdir); default the submit directory, which is "
    "then mounted at its own path, so that COMMAND's relative paths work as on the login node.",
)
@spec_option(
    "--container-mount-home/--no-container-mount-home",
    help="Mount your home directory into the containers (pyxis' default); ray.sub leaves it out.",
)
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
    help="Extra 'ray start' option; not one raysub sets, such as --temp-dir or --port.",
)
@option(
    "--ports",
    "ports_mode",
    type=click.Choice(get_args(PortsMode)),
    help="block (the default with --no-exclusive): each node takes a block of "
    f"{PORT_BLOCK_SIZE} ports from --port-range for this job, picked by its job id, checked free there and "
    "moved on when taken, so jobs that share nodes never collide; fixed (the default with --exclusive): "
    "the --*-port values on every node.",
)
@spec_option(
    "--port-range",
    metavar="FIRST-LAST",
    show_default=True,
    help="Where --ports block takes its blocks; keep it below the nodes' ephemeral ports "
    "(/proc/sys/net/ipv4/ip_local_port_range).",
)
@port_options
@option(
    "--interface", help="Take each node's IP from this network interface; default the node name's address."
)
@option("--dedicated-head", is_flag=True, help="The head node advertises no GPUs, so no work lands there.")
@option(
    "--head-partition",
    metavar="PARTITION",
    help="Put the head (and the driver) alone on a node of PARTITION, a cheap CPU node say: a heterogeneous "
    "job whose component 0 is the head, without GPUs (--dedicated-head), and component 1 the other "
    "--nodes minus one, the workers, still started by ONE srun.",
)
@option("--head-cpus", type=int, metavar="N", help="CPUs of the head's node for the job (--head-partition).")
@option(
    "--head-mem",
    metavar="SIZE",
    help="Memory of the head's node for the job, as sbatch --mem takes it: 16G, 4000.",
)
@spec_option(
    "--scale",
    type=click.Choice(get_args(ScaleMode)),
    show_default=True,
    help=f"large (auto: from {LARGE_SCALE_NODES} nodes on): workers join in waves of "
    f"{LARGE_SCALE.wave_nodes} that start as the GCS takes the waves before, with jitter; Ray's GCS "
    f"timeouts go to {LARGE_SCALE.ray_timeout_s} s unless set; the head reads Ray's node table once a second "
    "while nodes join; render warns when the head also runs work. normal: none of this.",
)
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
@option(
    "--autoscale",
    type=click.IntRange(min=2),
    metavar="MAX_NODES",
    help="Run Ray's own autoscaler on the head with raysub's node provider for Slurm: demand the cluster "
    "cannot hold (tasks, actors, placement groups) submits grow jobs of one node each, until the cluster has "
    "MAX_NODES nodes (the job's own included); idle grow nodes are released (docs/elastic.md).",
)
@option(
    "--autoscale-idle",
    type=int,
    default=DEFAULT_IDLE_S,
    metavar="SECONDS",
    help="How long a grow node may sit idle before the autoscaler releases it (drained, then scancel).",
)
@option(
    "--autoscale-partition",
    multiple=True,
    metavar="PARTITION",
    help="A partition grow jobs may run in (a preemptible one, say); Slurm's default partition when none.",
)
@option(
    "--autoscale-queue-timeout",
    type=int,
    default=DEFAULT_QUEUE_TIMEOUT_S,
    metavar="SECONDS",
    help="A grow job still in the queue this long is cancelled; LOG_DIR/autoscale.log says why it waited.",
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
    help="The signal the batch script passes on to the driver's process group (a preemption or time-limit "
    "warning): USR1 with --signal-before unless given. Without either, the batch script forwards no signal; "
    "give it alone to forward one you send yourself (scancel --batch --signal=USR1 JOB).",
)
@option(
    "--sandbox-command",
    help="Sidecar command (e.g. a code-execution server) started on sandbox nodes; it must listen on "
    "$RAYSUB_NODE_SANDBOX_PORT, which the driver and every Ray task on the node also get.",
)
@option(
    "--sandbox-port",
    type=int,
    help="Pin the sandbox's port on every node. Default: a free port of each node's block of Ray's ports "
    f"(--ports block, shared nodes), else {SANDBOX_FIXED_PORT}. Ready once the sandbox's own process "
    "listens there.",
)
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
    help="Seconds from the sandbox command's start until its own process listens on its port.",
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
    "--topology/--no-topology",
    help="Each node finds its NVLink domain (nvidia-smi -q) and Slurm switch or block and gives Ray "
    "NeMo-RL's resources (nvlink_domain_<ClusterUUID>, topo_rank) and labels raysub/switch, raysub/block, "
    "raysub/nvlink-domain, raysub/node, raysub/job (docs/topology.md).",
)
@spec_option(
    "--clean-mpi-env/--no-clean-mpi-env",
    help="Unset PMI_*, PMIX_*, MPI_* and OMPI_* before 'ray start' (never SLURM_*), so that MPI_Init inside "
    "Ray (TensorRT-LLM) does not take Slurm's step for an MPI launcher.",
)
@spec_option(
    "--step-regex",
    metavar="RE",
    help="How the driver's log shows a training step, when it is none of the forms raysub reads "
    "(docs/health.md): a regular expression with a group named 'step' (and optionally 'total'). Recorded "
    "in LOG_DIR/step_sources.json, so raysub health, watch and report read the step with it unless given "
    "their own.",
)
@spec_option(
    "--tensorboard-dir",
    metavar="DIR",
    help="Where the trainer writes TensorBoard events (relative to this directory): recorded in LOG_DIR, so "
    "raysub health and watch read the step from them when the trainer reports none (docs/health.md).",
)
@spec_option(
    "--metrics-file",
    metavar="FILE",
    help="JSON-lines metrics the trainer writes, with a step key (global_step, num_updates, step, iteration, "
    "training_iteration): recorded in LOG_DIR like --tensorboard-dir.",
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
    "--nccl-debug/--no-nccl-debug",
    help="Set NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET when neither is set, so that raysub health can tell "
    "which network NCCL uses on each node (a few dozen start-up lines per rank; docs/health.md).",
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
    help="Before Ray starts on a node, check its GPUs with nvidia-smi (raysub/job/programs/preflight.py): "
    "a GPU held by another process, too little free memory, fewer GPUs than --gpus-per-node. warn: record "
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
    "--keep-ray-logs",
    type=int,
    metavar="MIB",
    help="As each node leaves, keep this much of its Ray logs (raylet.out, gcs_server.out, the workers' "
    ".out/.err; before compression, newest first) in LOG_DIR/ray-logs/<node>/, where raysub logs --ray "
    "and raysub health read them. 0: keep none.",
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
    "--profile",
    help="Take defaults from [profiles.NAME] in ./raysub.toml or ~/.config/raysub/raysub.toml.",
    shell_complete=complete_profile,
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
    _, script = rendered(ctx, values)
    if output is None:
        click.echo(script, nl=False)
    else:
        write_output(output, script)


def rendered(ctx: click.Context, values: dict[str, Any]) -> tuple[JobSpec, str]:
    """The spec and script that render's options (and its --profile) make; its warnings said on stderr."""
    from raysub.job.render import render as render_script
    from raysub.resume import refuse_missing_checkpoint_dir

    apply_profile(ctx, values.pop("profile"))
    values.update({k: v for k, v in ctx.params.items() if k in values})
    try:
        spec = spec_from_options(values)
        script = render_script(spec)
        refuse_missing_checkpoint_dir(spec)
    except SpecError as error:
        raise click.BadParameter(error.message, param_hint=f"'{error.option}'") from error
    for warning in spec.warnings:
        click.echo(f"raysub: warning: {warning}", err=True)
    return spec, script


@click.pass_context
def _submit(ctx: click.Context, /, output: Path | None, wait: bool, **values: Any) -> None:
    from raysub import submit as submitting
    from raysub.status import Phase

    spec, script = rendered(ctx, values)
    cwd = Path.cwd()
    try:
        base = submitting.log_base(spec, cwd)
        job_id = submitting.sbatch(script, cwd, output)
    except submitting.SubmitError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"raysub: submitted job {job_id}; its logs go to {LogDir.of(base, job_id).path}", err=True)
    if spec.array is not None:
        click.echo(f"raysub: an array job: follow a task with raysub status {job_id}_TASK --follow", err=True)
        click.echo(job_id)
        return
    last = None
    redraw = sys.stderr.isatty()
    pointed = False  # at the dashboard, once
    try:
        for last in submitting.follow(job_id, base, until_end=wait):
            line = submitting.stage(last)
            dashboard = None if pointed else submitting.dashboard_line(last)
            if dashboard is not None:
                pointed = True
                click.echo(f"\r\033[K{dashboard}" if redraw else dashboard, err=True)
            click.echo(f"\r\033[K{line}" if redraw else line, nl=not redraw, err=True)
    except KeyboardInterrupt:
        click.echo(f"\nraysub: stopped following; job {job_id} goes on (raysub status {job_id})", err=True)
        sys.exit(130)
    if redraw:
        click.echo(err=True)
    click.echo(job_id)
    # Without --wait it stops once the driver runs: 0. A job that ended first says how it ended.
    if last is not None and last.phase != Phase.DRIVER_RUNNING:
        sys.exit(submitting.exit_status(last))


submit = click.Command(
    "submit",
    callback=_submit,
    params=[
        *(param for param in render.params if param.name != "output"),
        click.Option(
            ["--output", "-o"],
            type=click.Path(dir_okay=False, path_type=Path),
            help="Keep the submitted script here too.",
        ),
        click.Option(
            ["--wait"], is_flag=True, help="Follow the job to its end; exit with the driver's status."
        ),
    ],
    context_settings=render.context_settings,
    help="""Render a job as render does, check it, sbatch it and follow its bring-up.

    Takes every option of raysub render. The script passes raysub validate before sbatch sees it (-o
    keeps a copy). Then one line says where the job stands, and changes as it does: queued (with
    Slurm's reason, in words, and the start it expects), head starting, workers 61/63 (missing
    node017), driver running; once the head is up, a line says where its dashboard is (raysub
    dashboard JOB: how to reach it from a laptop). It stops there, or with --wait when the job ends,
    exiting with the driver's status. Ctrl-C stops the following, never the job. The job id is the
    one line on stdout.

    \b
    Example:
      raysub submit --nodes 4 --gpus-per-node 8 -p batch -t 4:00:00 -- python train.py
      raysub submit --nodes 2 --wait -- python eval.py && echo passed
    """,
)


@click.command(context_settings={"show_default": True})
@size_options
@spec_option("--gpus-per-node", type=int, help="GPUs per node of the partition the run goes to.")
@option(
    "--domain-nodes",
    type=int,
    metavar="N",
    help="Nodes one multi-node NVLink domain holds (18 on a GB200/GB300 NVL72 of 4-GPU trays): say "
    "whether tensor-parallel groups fit whole.",
)
@option(
    "--switch-nodes",
    type=int,
    metavar="N",
    help="Nodes under one leaf switch or Slurm block: say whether model replicas (tp x pp) fit whole.",
)
@json_option("the plan")
def plan(
    gpus_per_node: int, domain_nodes: int | None, switch_nodes: int | None, as_json: bool, **sizes: int | None
) -> None:
    """Say how many GPUs and nodes a run with these parallel sizes needs.

    World size = tp x pp x max(dp, cp, dcp) GPUs; nodes = world size / --gpus-per-node, rounded up.
    Each size also takes the spellings of Megatron-LM, vLLM, SGLang, NeMo-RL, verl and TensorRT-LLM.
    On more than one node a tensor-parallel group must lie on one node or on whole nodes, and dp, cp
    and dcp must each divide the largest of them (exit status 2 and the option at fault otherwise).
    GPUs left unused on the last node are a warning (left_over_gpus in --json). With --domain-nodes or
    --switch-nodes, says how the groups fall on NVLink domains and leaf switches (ranks in raysub's
    topology order) and warns of a group that must straddle one. Rules, and how sizes map onto each
    framework: docs/plan.md.

    \b
    Example:
      raysub plan --tp 8 --pp 2 --dp 4 --gpus-per-node 8
      raysub plan --tp 8 --pp 4 --dp 9 --gpus-per-node 4 --domain-nodes 18 --switch-nodes 18
      raysub plan --tensor-model-parallel-size 4 --context-parallel-size 2 --dp 4 --json
      raysub render --tp 8 --pp 2 --dp 4 --gpus-per-node 8 -- python train.py > job.sub
    """
    try:
        result = planning.plan(gpus_per_node, **sizes)
        where = planning.placement(result, domain_nodes, switch_nodes)
    except planning.PlanError as error:
        raise click.BadParameter(error.message, param_hint=f"'{error.option}'") from error
    for warning in [*([result.warning] if result.warning else []), *where.warnings()]:
        click.echo(f"raysub: warning: {warning}", err=True)
    if as_json:
        placed = {"placement": {**asdict(where), "warnings": where.warnings()}}
        shown = {**result.as_dict(), **(placed if domain_nodes or switch_nodes else {})}
        click.echo(json.dumps(shown, indent=2))
    else:
        click.echo("\n".join([result.describe(), *where.describe()]))


@click.command()
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
