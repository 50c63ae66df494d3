"""The options and arguments more than one command takes, each defined once, and the lookup of a JOB
argument they share.

Nothing here imports ray, nor any module that does: every command's --help must stay fast.
"""

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.shell_completion import CompletionItem

from raysub import plan as planning
from raysub.health.options import SLOW_STEP_FACTOR, SLOW_STEP_LIMIT_FACTOR, SLOW_STEP_LIMIT_FLOOR, Options
from raysub.protocol.step_sources import step_regex_problem
from raysub.spec import JobSpec
from raysub.status import SLURM_MIN_INTERVAL

if TYPE_CHECKING:
    from raysub.jobs import Job

F = TypeVar("F", bound=Callable[..., Any])

# Built-in defaults come from the spec itself, so the command line and the library cannot disagree.
SPEC_DEFAULT = {f.name: f.default for f in fields(JobSpec)}


class OnePerLine(click.types.StringParamType):
    """Text; from an environment variable, one value per line (click's default splits at every space, which
    would cut RAYSUB_ENV='NCCL_IB_HCA=mlx5_0 mlx5_1' in two)."""

    envvar_list_splitter = "\n"


def option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A click option that also reads its default from RAYSUB_<NAME> (e.g. RAYSUB_GPUS_PER_NODE); a
    repeatable text option takes one value per line of it."""
    long = next(d for d in decls if d.startswith("--")).split("/")[0]
    envvar = "RAYSUB_" + long[2:].upper().replace("-", "_")
    kwargs.setdefault("envvar", envvar)
    kwargs.setdefault("show_envvar", True)
    if kwargs.get("multiple") and "type" not in kwargs:
        kwargs["type"] = OnePerLine()
        kwargs["help"] = f"{kwargs.get('help', '')} Repeatable; in {envvar}, one per line.".lstrip()
    return click.option(*decls, **kwargs)


def spec_option(*decls: str, **kwargs: Any) -> Callable[[F], F]:
    """An option whose built-in default is the JobSpec field of its name (--gpus-per-node: gpus_per_node)."""
    long = next(d for d in decls if d.startswith("--")).split("/")[0]
    kwargs.setdefault("default", SPEC_DEFAULT[long[2:].replace("-", "_")])
    return option(*decls, **kwargs)


def one_size(ctx: click.Context, param: click.Parameter, values: tuple[int, ...]) -> int | None:
    """A parallel size given more than once (--tp 2 --tensor-parallel-size 4) must say the same each time."""
    if len(set(values)) > 1:
        said = " and ".join(str(value) for value in values)
        raise click.BadParameter(f"given as {said}; give it once", ctx, param_hint=f"'--{param.name}'")
    return values[-1] if values else None


def size_options(func: F) -> F:
    """--tp, --pp, --dp, --cp and --dcp, each also under the spellings frameworks use (raysub.plan.SIZES)."""
    for size in reversed(planning.SIZES):
        func = option(
            *size.flags,
            size.name,
            type=int,
            multiple=True,  # to see every spelling given: click keeps only the last of one option
            callback=one_size,
            metavar="N",
            help=f"{size.meaning} Default 1.",
        )(func)
    return func


def write_output(path: Path, text: str) -> None:
    """``text`` into the file --output names; a path that cannot be written is one line naming it, exit 2."""
    try:
        path.write_text(text)
    except OSError as error:
        reason = error.strerror or str(error)
        raise click.BadParameter(f"cannot write {path}: {reason}", param_hint="'--output' / '-o'") from error


def json_option(what: str) -> Callable[[F], F]:
    """--json: print ``what`` as JSON rather than for a person."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON.")


def seconds_option(
    flag: str, default: float, metavar: str, help_text: str, above_zero: bool = False
) -> Callable[[F], F]:
    """A duration in seconds, never negative (never zero either when ``above_zero``)."""
    return click.option(
        flag,
        type=click.FloatRange(min=0, min_open=above_zero),
        default=default,
        show_default=True,
        metavar=metavar,
        help=help_text,
    )


def log_dir_option(shown: str, help_text: str) -> Callable[[F], F]:
    """--log-dir of a command that reads jobs' LOG_DIRs: their base directory, as ``base``; ``shown`` says
    what the base is when it is not given."""
    path = click.Path(file_okay=False, path_type=Path)
    return option("--log-dir", "base", type=path, show_default=shown, help=help_text)


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of JOB: the job ids under --log-dir (or here) and in the job index, newest first."""
    from raysub.jobs import known_ids

    base = ctx.params.get("base") or Path.cwd()
    return [CompletionItem(job_id) for job_id in known_ids(base) if job_id.startswith(incomplete)]


def complete_profile(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Shell completion of --profile: the profiles of ./raysub.toml and ~/.config/raysub/raysub.toml."""
    from raysub.profiles import profile_names

    return [CompletionItem(name) for name in profile_names() if name.startswith(incomplete)]


def job_options(func: F) -> F:
    """JOB and the options that find its LOG_DIR (--log-dir, --attempt); :func:`find_job` takes them."""
    func = click.option(
        "--attempt", type=int, help="Which attempt of a requeued job (0 = the first); default the newest."
    )(func)
    func = log_dir_option(
        "the current directory",
        "The base directory of the job's <jobid>-logs directories. A job id is looked for here, then in "
        "the current directory, the job index and Slurm's record of the job.",
    )(func)
    return click.argument("job", required=False, shell_complete=complete_job)(func)


def find_job(job: str | None, base: Path | None, attempt: int | None) -> "Job":
    """The job that :func:`job_options` name; a usage error when there is none."""
    from raysub.jobs import JobNotFound, resolve

    try:
        return resolve(job, base, attempt)
    except JobNotFound as error:
        raise click.UsageError(str(error)) from error


def find_jobs(job: str | None, base: Path | None, attempt: int | None) -> tuple[list["Job"], bool]:
    """As find_job, or every task of the array job JOB names (and True)."""
    from raysub.jobs import JobNotFound, resolve_all

    try:
        return resolve_all(job, base, attempt)
    except JobNotFound as error:
        raise click.UsageError(str(error)) from error


def follow_option(help_text: str) -> Callable[[F], F]:
    """--follow (-f): keep going until the job ends, rather than answer once."""
    return click.option("--follow", "-f", is_flag=True, help=help_text)


def redraw_interval(default: float, help_text: str) -> Callable[[F], F]:
    """--interval of a command that asks Slurm again and again (a redraw, a watch): at least
    SLURM_MIN_INTERVAL, so that no command hammers Slurm."""
    return click.option(
        "--interval",
        type=click.FloatRange(min=SLURM_MIN_INTERVAL),
        default=default,
        show_default=True,
        help=help_text,
    )


def step_regex(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--step-regex: a regular expression with a group named 'step'."""
    if value is None:
        return None
    if (why := step_regex_problem(value)) is not None:
        raise click.BadParameter(why)
    return value


def progress_options(stall_help: str) -> Callable[[F], F]:
    """--step-regex, --stall-after and --slow-step-limit: how a command reads the driver's progress (raysub
    health's checks)."""

    def decorate(func: F) -> F:
        func = click.option(
            "--metrics-file",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
            help="JSON-lines metrics the trainer writes, with a step key (global_step, num_updates, step, "
            "iteration, training_iteration): the step of its last line, before the driver's text.",
        )(func)
        func = click.option(
            "--tensorboard-dir",
            type=click.Path(file_okay=False, path_type=Path),
            metavar="DIR",
            help="Where the trainer writes TensorBoard event files: the step of the newest event, before "
            "the driver's text (a step the trainer reports with raysub.trainer comes first; docs/health.md).",
        )(func)
        func = click.option(
            "--slow-step-limit",
            type=click.FloatRange(min=1),
            metavar="SECONDS",
            help="A step that takes this long counts as stalled even while the driver keeps printing "
            f"(before, from {SLOW_STEP_FACTOR:g} median step times on, it is a slow_step warning). Default: "
            f"{SLOW_STEP_LIMIT_FACTOR:g} median step times, at least {SLOW_STEP_LIMIT_FLOOR / 3600:g} hours.",
        )(func)
        func = click.option(
            "--stall-after",
            type=click.FloatRange(min=1),
            default=Options.stall_after,
            show_default=True,
            metavar="SECONDS",
            help=stall_help,
        )(func)
        return step_regex_option(func)

    return decorate


def step_regex_option(func: F) -> F:
    """--step-regex: how the driver's log shows a step (raysub health, watch and report)."""
    return click.option(
        "--step-regex",
        metavar="RE",
        callback=step_regex,
        help="How the driver's log shows a training step: a regular expression with a group named "
        "'step' (and optionally 'total'). Default: the one the job was rendered with (render "
        "--step-regex), else the forms verl, NeMo-RL, OpenRLHF, SkyRL, AReaL, Megatron, HF, Lightning, "
        "DeepSpeed, torchtitan and Ray Train print (docs/health.md).",
    )(func)
