"""docs/cli.md is generated from the commands' --help, so the reference never drifts from the code.

Regenerate after changing an option or a help text:
    RAYSUB_REGENERATE_GOLDEN=1 scripts/test tests/unit/test_docs.py
"""

import os

import click
from click.testing import CliRunner

from raysub.cli import cli
from tests.support.prereq import REPO

DOC = REPO / "docs" / "cli.md"


def generate() -> str:
    parts = [
        "# Command reference\n\n",
        "Generated from `raysub --help` by tests/unit/test_docs.py; edit the help texts in raysub/cli.py.\n",
    ]
    assert isinstance(cli, click.Group)
    for args in [[], *([name] for name in sorted(cli.commands))]:
        title = " ".join(["raysub", *args])
        result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=100)
        assert result.exit_code == 0, result.output
        parts.append(f"\n## `{title}`\n\n```\n{result.output}```\n")
    return "".join(parts)


def test_cli_reference_is_up_to_date() -> None:
    text = generate()
    if os.environ.get("RAYSUB_REGENERATE_GOLDEN") == "1":
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/cli.md is stale; regenerate it (see this module's docstring)"
