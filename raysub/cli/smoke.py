"""raysub smoke: the smoke test's own program (raysub/job/programs/smoke.py), run as it is; its command line,
help included, is that program's alone."""

import os
import shutil
import subprocess
import sys
import threading
from typing import IO

import click

from raysub import protocol

PROGRAM = "raysub.job.programs.smoke"


def copy_lines(source: IO[str], err: bool) -> None:
    """Pass ``source`` on, line by line as it comes, to this process's stdout (or stderr)."""
    for line in source:
        click.echo(line, nl=False, err=err)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def smoke(args: tuple[str, ...]) -> None:
    """Prove a running job's placement: one actor per GPU (or node), each where it should be."""
    # A child, not exec: its output goes through this process's streams, where a caller in the same
    # process (click's test runner, docs/cli.md's generator) sees it. Its usage line says raysub smoke and
    # its help is as wide as this terminal (its own stdout is a pipe).
    env = {
        **os.environ,
        protocol.ENV_SMOKE_PROG: "raysub smoke",
        "COLUMNS": str(shutil.get_terminal_size().columns),
    }
    argv = [sys.executable, "-m", PROGRAM, *args]
    with subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        errors = threading.Thread(target=copy_lines, args=(child.stderr, True), daemon=True)
        errors.start()
        copy_lines(child.stdout, err=False)
        errors.join()
    # Killed by a signal (a negative return code): the shell's 128 + signal number.
    sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)
