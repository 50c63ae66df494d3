"""Rendered scripts for three typical configurations, compared with files checked in next to this test.

After an intended change to the templates, regenerate them and review the diff:
    RAYSUB_REGENERATE_GOLDEN=1 scripts/test tests/golden
"""

import os
from pathlib import Path

import pytest

from raysub.render import render
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
    script = render(CONFIGS[name])
    if REGENERATE:
        golden.write_text(script)
    assert golden.exists(), f"{golden} is missing; run with RAYSUB_REGENERATE_GOLDEN=1"
    assert script == golden.read_text(), f"{golden.name} differs; if intended, regenerate (see module doc)"


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
    start = next(i for i, line in enumerate(lines) if line.startswith('cat >"$LOG_DIR/head.sh"'))
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
