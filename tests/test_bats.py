"""Runs every bats file in tests/bats with bats-core from npm (scripts/setup installs it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.prereq import REPO, tool

BATS_FILES = sorted((REPO / "tests" / "bats").glob("*.bats"))


@pytest.mark.parametrize("bats_file", BATS_FILES, ids=[p.name for p in BATS_FILES])
def test_bats(bats_file: Path) -> None:
    bats = tool("bats", REPO / "node_modules" / "bats" / "bin" / "bats")
    # The helpers render scripts with this interpreter, which has raysub installed.
    env = {**os.environ, "RAYSUB_TEST_PYTHON": sys.executable}
    out = subprocess.run(
        [bats, "--tap", str(bats_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
