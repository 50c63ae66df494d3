"""Rendered scripts for three typical configurations, compared with files checked in next to this test.

The raysub modules a script ships to the nodes (raysub/node/ and what it uses) appear in the golden files
as one marker line each, so that a change to them does not rewrite every golden file; their own tests
cover them. A mismatch prints the unified diff. After an intended change to the templates, regenerate
the files and review the diff:
    RAYSUB_REGENERATE_GOLDEN=1 scripts/test tests/golden
"""

import difflib
import os
import re
from pathlib import Path

import pytest

from raysub import protocol
from raysub.render import node_library, render
from raysub.spec import JobSpec, Sandbox
from tests.conftest import RunCli
from tests.support.prereq import tool

HERE = Path(__file__).parent
REGENERATE = os.environ.get("RAYSUB_REGENERATE_GOLDEN") == "1"

CONFIGS = {
    "bare_metal": JobSpec(
        nodes=4,
        partition="batch",
        account="ml-infra",
        time="4:00:00",
        env=(("HF_HOME", "/data/hf cache"), ("WANDB_PROJECT", "sft")),
        setup="source /opt/venv/bin/activate",
        command=("python", "train.py", "--lr", "3e-4", "--name", "it's $HOME"),
    ),
    "pyxis": JobSpec(
        nodes=8,
        gpus_per_node=8,
        cpus_per_task=64,
        container_image="nvcr.io/nvidia/pytorch:25.01-py3",
        container_mounts="/lustre:/lustre",
        container_workdir="/workspace",
        interface="ib0",
        dedicated_head=True,
        sbatch_args=("--qos=high",),
        log_dir="/lustre/logs/sft",
        command=("python", "-m", "nemo_rl.train", "cluster.num_nodes=8"),
    ),
    "sandbox": JobSpec(
        nodes=2,
        gpus_per_node=0,
        time="30",
        sandbox=Sandbox(command="python -m sandbox_server --port 8500", port=8500, nodes="all"),
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_rendered_script_matches_golden(name: str) -> None:
    golden = HERE / f"{name}.sub"
    script = with_markers(render(CONFIGS[name]))
    if REGENERATE:
        golden.write_text(script)
    assert golden.exists(), f"{golden} is missing; run with RAYSUB_REGENERATE_GOLDEN=1"
    expected = golden.read_text()
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True), script.splitlines(keepends=True), str(golden), "rendered"
    )
    assert script == expected, (
        f"{golden.name} differs; if intended, regenerate (see module doc):\n" + "".join(diff)
    )


def with_markers(script: str) -> str:
    """``script`` with the body of each shipped raysub module replaced by one line naming it."""
    for name, _ in node_library():
        heredoc = re.compile(
            "^(" + re.escape(f'cat >"$LOG_DIR/{name}" <<\'') + r"(\w+)'\n).*?^\2$", re.MULTILINE | re.DOTALL
        )
        marker = f"# {name.removeprefix(protocol.NODE_PYTHON_DIR + '/')}, shipped as it is\n"
        script, found = heredoc.subn(r"\g<1>" + marker + r"\g<2>", script)
        assert found == 1, f"{name} is not embedded once"
    return script


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_golden_scripts_pass_strict_validation(raysub_cli: RunCli, name: str) -> None:
    tool("shellcheck")
    result = raysub_cli("validate", "--strict", str(HERE / f"{name}.sub"))
    assert result.code == 0, result.stderr
    assert "ok (" in result.stdout


def test_a_broken_embedded_script_fails_validation_naming_script_and_line(
    raysub_cli: RunCli, tmp_path: Path
) -> None:
    lines = (HERE / "bare_metal.sub").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('cat >"$STAGE/head.sh"'))
    # Line 6 of head.sh becomes an unterminated if.
    lines.insert(start + 6, "if true; then\n")
    broken = tmp_path / "broken.sub"
    broken.write_text("".join(lines))
    result = raysub_cli("validate", str(broken))
    assert result.code == 1
    assert result.stdout == ""
    assert f"{broken}: head.sh line " in result.stderr
    assert "syntax error" in result.stderr


def test_a_broken_batch_script_names_itself(raysub_cli: RunCli, tmp_path: Path) -> None:
    broken = tmp_path / "job.sub"
    broken.write_text("#!/bin/bash\necho ok\nfi\n")
    result = raysub_cli("validate", str(broken))
    assert result.code == 1
    assert f"{broken}: job.sub line 3: " in result.stderr
