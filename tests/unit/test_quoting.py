"""Every user value reaches bash byte-exact: the driver's argv and --env values."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from raysub import protocol
from raysub.job.render import render, shell_quote
from raysub.spec import JobSpec

# Anything an argv can carry: every character but NUL (and lone surrogates, which UTF-8 cannot encode).
ARG = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=24)
HOSTILE = ["a b", "it's", 'say "hi"', "$HOME", "$(id)", "`id`", "a;b", "line1\nline2", "naïve ☃ 日本", ""]
ECHO_ARGV = [sys.executable, "-c", "import json, sys; sys.stdout.write(json.dumps(sys.argv[1:]))"]


def write_embedded(script: str, name: str, log_dir: Path) -> Path:
    """Runs, with bash, the part of the batch script that writes ``name`` into LOG_DIR; returns the file."""
    lines = script.splitlines(keepends=True)
    heads = (f'cat >"$LOG_DIR/{name}" <<', f'cat >"$STAGE/{name}" <<')  # node scripts are staged first
    start = next(i for i, line in enumerate(lines) if line.startswith(heads))
    delimiter = lines[start].rstrip("\n").split("<<")[1].strip("'")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].rstrip("\n") == delimiter)
    snippet = "".join(lines[start : end + 1])
    subprocess.run(["bash", "-c", snippet], env={"LOG_DIR": str(log_dir), "STAGE": str(log_dir)}, check=True)
    return log_dir / name


def driver_argv(args: list[str], tmp: Path) -> list[str]:
    script = render(JobSpec(nodes=2, command=(*ECHO_ARGV, *args)))
    driver = write_embedded(script, protocol.DRIVER_SCRIPT, tmp)
    out = subprocess.run(["bash", str(driver)], capture_output=True, check=True)
    decoded: list[str] = json.loads(out.stdout)
    return decoded


@settings(max_examples=60, deadline=None)
@given(args=st.lists(ARG, max_size=5))
@example(args=HOSTILE)
@example(args=["RAYSUB_DRIVER_COMMAND_SH", "x\nRAYSUB_DRIVER_COMMAND_SH\ny"])
def test_driver_argv_arrives_byte_exact(args: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        assert driver_argv(args, Path(tmp)) == args


@settings(max_examples=60, deadline=None)
@given(value=ARG)
@example(value="\n".join(HOSTILE))
def test_shell_quote_is_one_word_that_expands_to_the_value(value: str) -> None:
    out = subprocess.run(
        ["bash", "-c", f'set -- {shell_quote(value)}; printf \'%s|%s\' "$#" "$1"'],
        capture_output=True,
        check=True,
    )
    assert out.stdout.decode() == f"1|{value}"


def test_env_values_are_exported_exactly() -> None:
    value = "\n".join(HOSTILE)
    script = render(JobSpec(nodes=1, env=(("HOSTILE", value),), command=("true",)))
    export = next(line for line in script.splitlines() if line.startswith("export HOSTILE="))
    assert export == f"export HOSTILE={shell_quote(value)}".splitlines()[0]
    start = script.index("export HOSTILE=")
    end = script.index("\nexport RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S")
    out = subprocess.run(
        ["bash", "-c", script[start:end] + '\nprintf %s "$HOSTILE"'], capture_output=True, check=True
    )
    assert out.stdout.decode() == value
