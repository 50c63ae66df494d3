"""Rendered scripts compared with files checked in next to this test, one file per piece.

A base job (``base``) is kept whole, one golden file per piece: the batch script's readable part (up to the
PAYLOAD line), each bash script it writes into LOG_DIR (lib.sh, node.sh, head.sh, ...) and the list of the
raysub modules it ships. Each option that changes the job has one small golden diff (``<option>.diff``)
from the base's pieces to its own, so that a change to the shared bash shows up once, in lib.sh, and an
option's golden shows only what that option changes. The shipped modules are compared with raysub's own
source (the same program, less comments, blank lines and docstrings), rather than kept here. A mismatch
prints the unified diff. After an intended change to the templates, regenerate the files and review the
diff:
    RAYSUB_REGENERATE_GOLDEN=1 scripts/test tests/golden
"""

import ast
import dataclasses
import difflib
import io
import os
import tokenize
from pathlib import Path

import pytest

from raysub import protocol
from raysub.job.render import PAYLOAD_LINE, is_program, node_library, render
from raysub.spec import JobSpec, Sandbox
from raysub.validate import extract
from tests.conftest import RunCli
from tests.support.prereq import tool

HERE = Path(__file__).parent
REGENERATE = os.environ.get("RAYSUB_REGENERATE_GOLDEN") == "1"
READABLE = "job.sub"  # the batch script up to and including the PAYLOAD line
SHIPPED = "shipped.txt"  # the raysub modules the job ships, one per line

BASE = JobSpec(
    nodes=4,
    partition="batch",
    account="ml-infra",
    time="4:00:00",
    env=(("HF_HOME", "/data/hf cache"), ("WANDB_PROJECT", "sft")),
    setup="source /opt/venv/bin/activate",
    command=("python", "train.py", "--lr", "3e-4", "--name", "it's $HOME"),
)
# Each changes the base in one way a real job does.
OPTIONS = {
    "pyxis": dataclasses.replace(
        BASE,
        container_image="nvcr.io/nvidia/pytorch:25.01-py3",
        container_mounts="/lustre:/lustre",
        container_workdir="/workspace",
        log_dir="/lustre/logs/sft",
    ),
    "gpus": dataclasses.replace(
        BASE, nodes=8, cpus_per_task=64, interface="ib0", dedicated_head=True, sbatch_args=("--qos=high",)
    ),
    "sandbox": dataclasses.replace(
        BASE,
        gpus_per_node=0,
        sandbox=Sandbox(command="python -m sandbox_server --port 6000", port=6000, nodes="all"),
    ),
    "shared": dataclasses.replace(BASE, exclusive=False, cpus_per_task=16),
    "array": dataclasses.replace(BASE, array="0-3%2"),
    "het": dataclasses.replace(BASE, head_partition="cpu", head_cpus=8, head_mem="32G", cpus_per_task=64),
    "large": dataclasses.replace(BASE, nodes=512, dedicated_head=True),
    "restarts": dataclasses.replace(
        BASE, driver_restarts=2, checkpoint_dir="/lustre/ckpt/run7", requeue=True, signal_before=300
    ),
    "interactive": dataclasses.replace(BASE, command=()),
    "smoke": dataclasses.replace(BASE, command=(), smoke=True),
}


def pieces(spec: JobSpec) -> dict[str, str]:
    """The readable part, each bash script the job writes into LOG_DIR, and the list of shipped modules."""
    script = render(spec)
    readable, marker, _ = script.partition(PAYLOAD_LINE)
    assert marker, "the rendered script has no PAYLOAD line"
    embedded = extract(script)
    shipped = [e.name for e in embedded if e.name.startswith(f"{protocol.NODE_PYTHON_DIR}/")]
    bash = {e.name: e.text for e in embedded if e.name not in shipped}
    return {READABLE: readable + marker + "\n", **bash, SHIPPED: "".join(f"{name}\n" for name in shipped)}


def check(golden: Path, text: str) -> None:
    if REGENERATE:
        golden.write_text(text)
        return
    expected = golden.read_text()
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True), text.splitlines(keepends=True), str(golden), "rendered"
        )
        pytest.fail(f"{golden.name} differs (RAYSUB_REGENERATE_GOLDEN=1 to accept):\n" + "".join(diff))


@pytest.mark.parametrize("piece", sorted(pieces(BASE)))
def test_base_job_matches_golden(piece: str) -> None:
    (HERE / "base").mkdir(exist_ok=True)
    check(HERE / "base" / piece, pieces(BASE)[piece])


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_option_changes_only_what_its_golden_diff_shows(name: str) -> None:
    base, option = pieces(BASE), pieces(OPTIONS[name])
    diff: list[str] = []
    for piece in sorted(base.keys() | option.keys()):
        diff += difflib.unified_diff(
            base.get(piece, "").splitlines(keepends=True),
            option.get(piece, "").splitlines(keepends=True),
            f"base/{piece}",
            f"{name}/{piece}",
        )
    check(HERE / f"{name}.diff", "".join(diff))


def program(source: str) -> str:
    """The syntax tree of ``source`` without its module docstring and the docstrings of functions and
    classes that have more in their body: what a job runs of a module."""
    tree = ast.parse(source)
    if ast.get_docstring(tree, clean=False) is not None:
        tree.body = tree.body[1:]
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if len(node.body) > 1 and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:]
    return ast.dump(tree)


@pytest.mark.parametrize("spec", [BASE, *OPTIONS.values()], ids=["base", *OPTIONS])
def test_shipped_modules_are_raysubs_own_source_less_what_never_runs(spec: JobSpec) -> None:
    embedded = {e.name: e.text for e in extract(render(spec))}
    for name, source in node_library(spec):
        text = source.read_text()
        assert program(embedded[name]) == program(text), name
        # A program's docstring is kept (its --help), no other module's; the first line names the source.
        kept = ast.get_docstring(ast.parse(text)) if is_program(source) else None
        assert ast.get_docstring(ast.parse(embedded[name])) == kept, name
        first, *rest = embedded[name].splitlines()
        where = source.relative_to(Path(protocol.__file__).parents[2])
        assert first.startswith(f"# {where} of raysub "), first
        # Past it, a blank line or one that starts with '#' is inside a string.
        strings = io.StringIO(embedded[name]).readline
        inside = {n for t in tokenize.generate_tokens(strings) for n in range(t.start[0] + 1, t.end[0] + 1)}
        bare = [n for n, line in enumerate(rest, 2) if not line.strip() or line.lstrip().startswith("#")]
        assert set(bare) <= inside, (name, bare)


@pytest.mark.parametrize("spec", [BASE, *OPTIONS.values()], ids=["base", *OPTIONS])
def test_rendered_scripts_pass_strict_validation(raysub_cli: RunCli, tmp_path: Path, spec: JobSpec) -> None:
    tool("shellcheck")
    job = tmp_path / "job.sub"
    job.write_text(render(spec))
    result = raysub_cli("validate", "--strict", str(job))
    assert result.code == 0, result.stderr
    assert "ok (" in result.stdout


def test_a_broken_embedded_script_fails_validation_naming_script_and_line(
    raysub_cli: RunCli, tmp_path: Path
) -> None:
    lines = render(BASE).splitlines(keepends=True)
    start = next(
        i for i, line in enumerate(lines) if line.startswith(f'cat >"$STAGE/{protocol.HEAD_SCRIPT}"')
    )
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
