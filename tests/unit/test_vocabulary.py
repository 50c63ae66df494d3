"""docs/architecture.md's vocabulary, kept true against the commands' --help: each command and option the
table names as where a word is met exists, and no --help says a word the table retires."""

import re

import pytest
from click.testing import CliRunner

from raysub.cli import cli
from tests.support.prereq import REPO

VOCABULARY = (REPO / "docs" / "architecture.md").read_text().partition("\n## Vocabulary\n")[2]
# A command as the table names it: `raysub watch --max-resubmissions`, `raysub status`.
NAMED = re.compile(r"`raysub ([a-z]+)((?: --[a-z][a-z-]*)*)`")


def rows(header: str) -> list[list[str]]:
    """The cells of each row of the vocabulary's table whose header row is ``header``."""
    table = VOCABULARY.partition(header + "\n")[2].partition("\n\n")[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[1:]]


def help_text(command: str) -> str:
    result = CliRunner().invoke(cli, [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, f"raysub {command} --help: {result.output}"
    return result.output


WORDS = rows("| word | what it means | where you meet it |")
RETIRED = rows("| retired | say instead | kept out of |")


def test_the_tables_are_there() -> None:
    assert len(WORDS) > 20 and any(row[0] == "**resubmit**" for row in WORDS)
    assert any(row[0] == "`--max-restarts`" for row in RETIRED)


@pytest.mark.parametrize("row", WORDS, ids=[row[0].strip("*") for row in WORDS])
def test_where_a_word_is_met_is_in_that_commands_help(row: list[str]) -> None:
    for command, flags in NAMED.findall(" ".join(row)):
        assert command in cli.commands, f"{row[0]}: there is no raysub {command}"
        shown = help_text(command)
        for flag in flags.split():
            assert re.search(rf"(?<![\w-]){re.escape(flag)}\b(?!-)", shown), (
                f"{row[0]}: raysub {command} --help shows no {flag}"
            )


@pytest.mark.parametrize("row", RETIRED, ids=[row[0].strip("`") for row in RETIRED])
def test_a_retired_word_is_in_no_help_it_is_kept_out_of(row: list[str]) -> None:
    retired, instead, kept_out_of = row
    commands = sorted(cli.commands) if kept_out_of == "every command" else NAMED.findall(kept_out_of)
    assert commands, f"{retired}: kept out of which command?"
    for command in commands:
        name = command if isinstance(command, str) else command[0]
        word = retired.strip("`")
        assert not re.search(rf"(?<![\w-]){re.escape(word)}", help_text(name), re.IGNORECASE), (
            f"raysub {name} --help says {word!r}: {instead}"
        )


def test_the_jobs_scripts_and_programs_say_look_never_poll_or_tick() -> None:
    """What the job's own scripts and programs do while they wait is a look (and a pause between two)."""
    job = REPO / "raysub" / "job"
    for path in sorted([*job.glob("templates/*.j2"), *job.glob("programs/*.py"), *job.glob("lib/*.py")]):
        said = re.findall(r"\b(?:tick|ticks|poll|polls|polling)\b", path.read_text(), re.IGNORECASE)
        assert not said, f"{path.relative_to(REPO)} says {said}: the word is look"
