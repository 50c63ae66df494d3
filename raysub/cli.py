"""The ``raysub`` command line: parses options, calls the library, prints.

Nothing here imports ray at module level, so ``raysub --help`` stays fast.
"""

import click

from raysub import __version__


@click.group(
    name="raysub", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, "-V", "--version", prog_name="raysub")
def main() -> None:
    """Ray on Slurm: render an sbatch script that brings a Ray cluster up in seconds and fails loudly.

    \b
    Example:
      raysub --version
    """
