"""Generated documentation, so it never drifts from the code: docs/cli.md from the commands' --help, and
docs/protocol.md's table of LOG_DIR's files from raysub.protocol.FILES.

Regenerate after changing an option, a help text or that table:
    RAYSUB_REGENERATE_GOLDEN=1 scripts/test tests/unit/test_docs.py
"""

import os

import click
from click.testing import CliRunner

from raysub import protocol
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


PROTOCOL_DOC = REPO / "docs" / "protocol.md"
TABLE_START = (
    "<!-- the table of files: generated from raysub/protocol.py FILES by tests/unit/test_docs.py -->\n"
)
TABLE_END = "<!-- end of the generated table -->\n"
REGENERATE = os.environ.get("RAYSUB_REGENERATE_GOLDEN") == "1"


def files_table() -> str:
    rows = ["| file | written by | content |\n", "|---|---|---|\n"]
    for doc in protocol.FILES:
        names = ", ".join(f"`{name}`" for name in doc.files)
        rows.append(f"| {names} | {doc.writer} | {doc.content} |\n")
    return "".join(rows)


def test_protocol_files_table_is_up_to_date() -> None:
    text = PROTOCOL_DOC.read_text()
    before, _, rest = text.partition(TABLE_START)
    _, _, after = rest.partition(TABLE_END)
    assert after, f"docs/protocol.md lacks the markers {TABLE_START!r} and {TABLE_END!r}"
    expected = before + TABLE_START + files_table() + TABLE_END + after
    if REGENERATE:
        PROTOCOL_DOC.write_text(expected)
    assert PROTOCOL_DOC.read_text() == expected, (
        "docs/protocol.md's table of files is stale; regenerate it (see module doc)"
    )


# Names in raysub/protocol.py that are not files of LOG_DIR, or are parts of names the table shows.
NOT_FILES = (
    *("PHASE_", "ENV_", "ROLE_", "CONTAINER_NAME_", "LOG_DIR_SUFFIX", "STATE_HOME_DEFAULT", "JOB_INDEX"),
    *("LATEST", "LOG_SUFFIX", "AUTH_DIR", "SRUN_LOG_PREFIX", "WORKER_LOG_PREFIX", "SANDBOX_LOG_PREFIX"),
    "SANDBOX_READY_PREFIX",
)


def test_every_file_of_log_dir_is_in_the_table() -> None:
    documented = {name for doc in protocol.FILES for name in doc.files}
    for name, value in protocol.template_names().items():
        if not name.startswith(NOT_FILES) and name != "NODE_PYTHON_DIR":
            assert value in documented, f"protocol.{name} ({value}) is not in protocol.FILES"
