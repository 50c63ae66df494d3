"""The tree stays ruff-, mypy- and shellcheck-clean; a lint failure is a test failure."""

import subprocess
import sys

from tests.support.prereq import REPO, tool


def check(*args: str) -> None:
    out = subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_lint() -> None:
    check(sys.executable, "-m", "ruff", "check", ".")


def test_ruff_format() -> None:
    check(sys.executable, "-m", "ruff", "format", "--check", ".")


def test_mypy() -> None:
    check(sys.executable, "-m", "mypy")


def test_shellcheck_on_our_scripts() -> None:
    shellcheck = tool("shellcheck")
    candidates = [
        *(REPO / "scripts").iterdir(),
        *(REPO / "benchmarks").iterdir(),
        *(REPO / "tests" / "fakes").iterdir(),
        REPO / ".ci" / "run",
    ]
    scripts = [str(p) for p in candidates if p.is_file() and p.read_text().startswith("#!/usr/bin/env bash")]
    helper = REPO / "tests" / "bats" / "test_helper.bash"
    check(shellcheck, "--severity=style", *scripts, "--shell=bash", str(helper))
