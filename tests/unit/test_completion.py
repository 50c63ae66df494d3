"""Shell completion (issue 26, item 4): raysub completion prints each shell's script; through it bash
completes commands, job ids (the LOG_DIRs here and the job index's, newest first) and profiles."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raysub import jobs
from raysub.profiles import profile_names
from raysub.protocol.job_index import IndexEntry, append_job_index, job_index_path
from tests.conftest import RunCli

RAYSUB = Path(sys.executable).parent / "raysub"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A submit directory with two jobs' LOG_DIRs (4712 the newer, with a second attempt), a profile file,
    and a job index that knows 4700 (LOG_DIR elsewhere) and 4600 (LOG_DIR gone)."""
    submit = tmp_path / "submit"
    for name, mtime in (("4711-logs", 100), ("4712-logs", 200), ("4712-1-logs", 300), ("notes", 400)):
        (submit / name).mkdir(parents=True)
        os.utime(submit / name, (mtime, mtime))
    (submit / "raysub.toml").write_text("[profiles.lab]\npartition = 'a'\n[profiles.big]\nnodes = 64\n")
    elsewhere = tmp_path / "other" / "4700-logs"
    elsewhere.mkdir(parents=True)
    state = tmp_path / "state"
    index = job_index_path({"XDG_STATE_HOME": str(state)})
    append_job_index(index, IndexEntry("4600", 0, tmp_path / "gone" / "4600-logs", 50))
    append_job_index(index, IndexEntry("4700", 0, elsewhere, 60))
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(submit)
    return submit


def complete(words: str) -> list[str]:
    """What bash offers after ``words`` through the script raysub completion prints (COMPREPLY)."""
    script = subprocess.run([RAYSUB, "completion", "bash"], capture_output=True, text=True, check=True).stdout
    probe = f"""{script}
COMP_WORDS=({words})
COMP_CWORD=${{#COMP_WORDS[@]}}
[[ "{words}" == *" " ]] || COMP_CWORD=$((COMP_CWORD - 1))
[[ "{words}" == *" " ]] && COMP_WORDS+=("")
_raysub_completion raysub
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    env = {**os.environ, "PATH": f"{RAYSUB.parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_job_ids_complete_from_here_then_the_index_newest_first(here: Path) -> None:
    assert complete("raysub status ") == ["4712", "4711", "4700"]
    assert complete("raysub logs 471") == ["4712", "4711"]
    assert complete("raysub dashboard --log-dir ../other ") == ["4700"]


def test_profiles_and_commands_complete(here: Path) -> None:
    assert complete("raysub render --profile ") == ["lab", "big"]
    assert "dashboard" in complete("raysub da")


def test_an_unreadable_profile_file_or_index_offers_nothing_and_never_fails(here: Path) -> None:
    (here / "raysub.toml").write_bytes(b"[profiles.caf\xe9]\n")
    assert profile_names() == []
    (here / "raysub.toml").write_text("profiles = 5\n")
    assert profile_names() == []
    assert jobs.known_ids(here / "missing", here / "no-index") == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_each_shells_script(raysub_cli: RunCli, shell: str) -> None:
    result = raysub_cli("completion", shell)
    assert result.code == 0, result.stderr
    assert "_RAYSUB_COMPLETE" in result.stdout


def test_an_unknown_shell_is_a_usage_error(raysub_cli: RunCli) -> None:
    result = raysub_cli("completion", "tcsh")
    assert result.code == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in result.stderr
