"""Runs every bats file in tests/bats with bats-core from npm (scripts/setup installs it)."""

import subprocess
from pathlib import Path

import pytest

from tests.support.prereq import REPO, tool

BATS_FILES = sorted((REPO / "tests" / "bats").glob("*.bats"))


@pytest.mark.parametrize("bats_file", BATS_FILES, ids=[p.name for p in BATS_FILES])
def test_bats(bats_file: Path) -> None:
    bats = tool("bats", REPO / "node_modules" / "bats" / "bin" / "bats")
    out = subprocess.run(
        [bats, "--tap", str(bats_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
