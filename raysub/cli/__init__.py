"""The ``raysub`` command line: parses options, calls the library, prints.

One module per kind of command: authoring a job (render, submit, plan, validate), operating one (status, logs,
attach, monitor, report), keeping a run going (health, watch), and the smoke test; the options several
commands share are in options.py. Nothing here imports ray at module level, so ``raysub --help`` stays fast.
"""

import sys
from collections.abc import Sequence

import click

from raysub import __version__
from raysub.cli import authoring, elastic, keeping, operating, smoke
from raysub.protocol import UntrustedFile


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


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the script that makes SHELL complete raysub's commands and options, job ids and profiles.

    Job ids come from the log directories under --log-dir (or the current directory) and the job index;
    profiles from ./raysub.toml and ~/.config/raysub/raysub.toml. bash needs version 4.4 or later.

    \b
    Example:
      eval "$(raysub completion bash)"          # in ~/.bashrc
      raysub completion fish > ~/.config/fish/completions/raysub.fish
    """
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # one of click's own shells
    click.echo(complete(cli, {}, "raysub", "_RAYSUB_COMPLETE").source())


for command in (
    authoring.render,
    authoring.submit,
    authoring.plan,
    authoring.validate,
    operating.status,
    operating.logs,
    operating.attach,
    operating.dashboard,
    operating.monitor,
    operating.report,
    keeping.health,
    keeping.watch,
    elastic.grow,
    elastic.shrink,
    smoke.smoke,
    completion,
):
    cli.add_command(command)


def command_hint(error: click.UsageError) -> str:
    """For an unknown option given to a command that runs a COMMAND: how to pass it to the COMMAND."""
    if not isinstance(error, click.NoSuchOption) or error.ctx is None:
        return ""
    if not any(isinstance(p, click.Argument) and p.name == "command" for p in error.ctx.command.params):
        return ""
    usage = f"raysub {error.ctx.command.name} [OPTIONS] -- COMMAND..."
    return f" If {error.option_name} is COMMAND's, put -- before COMMAND: {usage}"


def main(args: Sequence[str] | None = None) -> None:
    """Entry point: errors in how raysub was called are one line on stderr and exit status 2."""
    try:
        status = cli.main(args=args, prog_name="raysub", standalone_mode=False)
    except click.UsageError as error:
        click.echo(f"raysub: error: {error.format_message()}{command_hint(error)}", err=True)
        sys.exit(2)
    except click.ClickException as error:  # a state that stops the command: one line, as a usage error's
        click.echo(f"raysub: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except click.Abort:
        click.echo("raysub: aborted", err=True)
        sys.exit(1)
    except UntrustedFile as error:  # a job's signal file that someone else could have written
        click.echo(f"raysub: error: {error}", err=True)
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)
