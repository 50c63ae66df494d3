"""The pages a user reads first hold: every `sh` block of docs/quickstart.md runs as written (one after the
other, in one directory, with this checkout's raysub first on PATH), unless its first line says what it
needs that a test cannot have; every relative link of README.md, CHANGELOG.md and docs/ names a file that
exists, and its #anchor a heading there."""

import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.batch import run
from tests.support.prereq import REPO

QUICKSTART = REPO / "docs" / "quickstart.md"
# What a block may need that a test does not have; its first line says so: "# needs: a Slurm cluster".
NEEDS = ("# needs: a Slurm cluster", "# needs: network")
BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_every_quickstart_block_runs_or_says_what_it_needs(tmp_path: Path) -> None:
    found = blocks(QUICKSTART)
    runnable = [block for block in found if not block.startswith(NEEDS)]
    assert len(runnable) >= 5 and len(found) > len(runnable), "the page lost its blocks"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "LANG": "C.UTF-8",
    }
    for block in runnable:
        done = run(["bash", "-euo", "pipefail", "-c", block], env, tmp_path)
        assert done.returncode == 0, f"{block}\n{done.stderr}"
    assert (tmp_path / "job.sub").read_text().startswith("#!/bin/bash\n")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but - and _ dropped, spaces as -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = BLOCK.sub("", page.read_text())  # a "# comment" in a code block is no heading
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(BLOCK.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert broken == []
