"""The rendered job script: a readable part a person can read in a few minutes, then the PAYLOAD line and
below it exactly what the job's scripts use: the node programs they run and the modules those import."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from raysub import protocol
from raysub.job import manifest
from raysub.job.render import PAYLOAD_LINE, TEMPLATES, code_lines, node_library, node_programs, render
from raysub.spec import JobSpec, Sandbox
from raysub.validate import extract

PLAIN = JobSpec(nodes=2, command=("python", "train.py"))
# Every option that adds to the script at once: the biggest job script raysub writes.
BIGGEST = dataclasses.replace(
    PLAIN,
    nodes=64,
    container_image="nvcr.io/nvidia/pytorch:25.01-py3",
    container_mounts="/lustre:/lustre",
    container_workdir="/workspace",
    sandbox=Sandbox(command="python -m sandbox_server", port=6000, nodes="all", container="sandbox.sqsh"),
    driver_restarts=3,
    checkpoint_dir="/lustre/ckpt/run7",
    requeue=True,
    signal_before=300,
    preflight="fail",
    wait_gpus=300,
    interface="ib0",
    cpus_per_task=64,
    dedicated_head=True,
)
SPECS = {
    "plain": PLAIN,
    "biggest": BIGGEST,
    "cpu": dataclasses.replace(PLAIN, gpus_per_node=0, preflight="off"),
    "one node": dataclasses.replace(PLAIN, nodes=1),
    "interactive": dataclasses.replace(PLAIN, command=()),
    "smoke": dataclasses.replace(PLAIN, command=(), smoke=True),
    "restarts": dataclasses.replace(PLAIN, driver_restarts=2),
}
# How the scripts run each program: node_program NAME, join.py as a script, the gate on a PYTHONPATH.
RUNS = re.compile(
    r"node_program (?P<program>\w+)|/raysub/job/programs/(?P<script>join)\.py|/(?P<gate>driver_gate)\$"
)
# The node script each template becomes (the partials are part of the one that includes them).
TEMPLATE_SCRIPTS = {
    "head.sh.j2": protocol.HEAD_SCRIPT,
    "worker.sh.j2": protocol.WORKER_SCRIPT,
    "driver_command.sh.j2": protocol.DRIVER_SCRIPT,
    "node.sh.j2": protocol.NODE_BASH,
    "_ray.sh.j2": protocol.NODE_BASH,
}
CALL = re.compile(r"program_(?:call|args)\(\"(\w+)\"\)")
# Lines a job script may have, by kind of job: what each measured once its job shipped only the programs it
# runs (a plain job had 4,625 lines before, a restarts job 6,074), with about 50 to spare; then every job
# got the topology program (--topology, on by default: about 440 lines, 370 of them Python), and the smoke
# test its topology check (about 50). Then the shipped Python lost its comments, blank lines and function
# docstrings (render.shipped_text): plain 4,758 to 3,895 lines, restarts 5,352 to 4,371. Grow jobs' drain
# (leave.py) took plain to 4,015; modules other than programs then lost their docstrings too: 3,811.
BUDGETS = {
    "plain": (PLAIN, 4000),
    "restarts": (dataclasses.replace(PLAIN, driver_restarts=2), 5200),
    "smoke": (dataclasses.replace(PLAIN, command=(), smoke=True), 4600),
    "containers": (dataclasses.replace(PLAIN, container_image="nvcr.io/nvidia/pytorch:25.01-py3"), 4050),
}


def readable_lines(spec: JobSpec) -> int:
    return render(spec).partition(PAYLOAD_LINE)[0].count("\n")


def test_a_plain_jobs_readable_part_is_a_few_hundred_lines() -> None:
    # 450 and 500 until the check that LOG_DIR's base is safe from other users (about 45 lines) came; then
    # 475 and 525; a plain job lost the signal forwarding it never asked for (97 lines), and every job got
    # its run order at the top (about 25 lines) and the shared bash the supervisor uses (about 210: its
    # functions are defined above the PAYLOAD line, not below it); then the workers' order by switch
    # (--topology, about 40 lines).
    assert readable_lines(PLAIN) < 665
    assert readable_lines(BIGGEST) < 815


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_scripts_run_exactly_the_programs_the_spec_says(name: str) -> None:
    embedded = extract(render(SPECS[name]))
    scripts = "".join(e.text for e in embedded if not e.name.startswith(f"{protocol.NODE_PYTHON_DIR}/"))
    run = {next(name for name in match.groups() if name) for match in RUNS.finditer(scripts)}
    assert run == set(node_programs(SPECS[name]))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_payload_holds_what_its_programs_import_and_nothing_else(name: str, tmp_path: Path) -> None:
    """Each program is imported from LOG_DIR's copy alone, by a Python that cannot see raysub otherwise:
    nothing it needs is missing, and every module shipped is one it loaded."""
    spec = SPECS[name]
    shipped = set()
    for script in extract(render(spec)):
        if script.name.startswith(f"{protocol.NODE_PYTHON_DIR}/raysub/"):
            (tmp_path / script.name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / script.name).write_text(script.text)
            shipped.add(script.name.removeprefix(f"{protocol.NODE_PYTHON_DIR}/"))
    programs = [
        f"raysub.job.programs.{program}" for program in node_programs(spec) if program != "driver_gate"
    ]
    probe = (
        "import importlib, json, sys\n"
        f"for name in {programs!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'raysub')))"
    )
    python_dir = tmp_path / protocol.NODE_PYTHON_DIR
    # -S: no site, so no raysub installed in this venv, and PYTHONPATH alone.
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PYTHONPATH": str(python_dir), "PYTHONSAFEPATH": "1", "PATH": os.environ["PATH"]},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    if "No module named 'ray'" in done.stderr:
        pytest.skip("ray is not importable without site-packages here")
    assert done.returncode == 0, done.stderr
    loaded = {str(Path(path).relative_to(python_dir)) for path in json.loads(done.stdout)}
    assert loaded == shipped


def test_the_shared_bash_is_written_once() -> None:
    embedded = extract(render(BIGGEST))
    bash = [e for e in embedded if not e.name.startswith(f"{protocol.NODE_PYTHON_DIR}/")]
    for function in ("end_job()", "timeline()", "publish()", "wait_for_file()", "node_program()"):
        defined = [e.name for e in bash if f"\n{function} {{" in f"\n{e.text}"]
        assert defined == [protocol.SHARED_BASH], function


def test_every_program_a_template_calls_is_a_manifest_row_of_that_script() -> None:
    called = set()
    for template in sorted(TEMPLATES.glob("*.j2")):
        text = template.read_text()
        assert not re.search(r"node_program \w", text), f"{template.name} spells a program's call itself"
        for name in CALL.findall(text):
            assert name in manifest.ROWS, f"{template.name} calls {name}, which has no manifest row"
            assert manifest.ROWS[name].script == TEMPLATE_SCRIPTS[template.name], (template.name, name)
            called.add(name)
    # driver_gate is no call: the head puts it on the early driver's PYTHONPATH.
    assert called == set(manifest.ROWS) - {"driver_gate"}


def shipped(spec: JobSpec) -> set[str]:
    return {name for name, _ in node_library(spec)}


def test_a_job_ships_only_the_code_of_the_programs_it_runs() -> None:
    restarts = shipped(BUDGETS["restarts"][0])
    assert not [name for name in restarts if "smoke" in name]
    quiet = shipped(dataclasses.replace(PLAIN, monitor=False))
    monitor_code = ("programs/monitor.py", "lib/scrape.py", "readings.py", "metrics_log.py")
    assert not [name for name in quiet if name.endswith(monitor_code)]
    assert [name for name in shipped(PLAIN) if name.endswith(monitor_code)]


# What code_lines must keep: strings that hold '#' or blank lines, a body that is only its docstring, a
# docstring sharing its line with code, and continued lines; and what it drops.
TRICKY = '''"""The module's docstring stays (a program's --help).

Its blank line too."""
# a comment goes

TEXT = """first

# not a comment: inside a string
"""


def documented(x):
    """Goes."""
    # goes
    return x + 1  # a trailing comment stays on its code line


def only_a_docstring():
    """Stays: a body needs a statement."""


class Shared:
    "Stays: it shares its line with code."; size = 1


URL = "http://host/#anchor"
TOTAL = (1 +
         # goes
         2) \\
    * 3
'''

# The lines of TRICKY that go: comments alone on their line, blank lines outside strings, a docstring.
GONE = {4, 5, 10, 11, 13, 14, 16, 17, 20, 21, 24, 25, 28}


def test_shipped_python_loses_only_comments_blank_lines_and_docstrings() -> None:
    kept = "".join(
        line for number, line in enumerate(TRICKY.splitlines(keepends=True), 1) if number not in GONE
    )
    assert code_lines(TRICKY) == kept
    namespace: dict[str, object] = {}
    exec(compile(kept, "kept", "exec"), namespace)  # noqa: S102 (our own text)
    assert namespace["TOTAL"] == 9 and namespace["TEXT"] == "first\n\n# not a comment: inside a string\n"
    # A module that is not a program ships without its docstring, even when it is all the module holds.
    assert code_lines(TRICKY, module_doc=False) == "".join(kept.splitlines(keepends=True)[3:])
    assert code_lines('"""Only this."""\n', module_doc=False) == ""


@pytest.mark.parametrize("kind", sorted(BUDGETS))
def test_a_job_script_stays_within_its_line_budget(kind: str) -> None:
    spec, budget = BUDGETS[kind]
    lines = render(spec).count("\n")
    assert lines <= budget, f"a {kind} job script is {lines} lines, past its budget of {budget}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_part_above_the_payload_defines_all_it_runs(name: str) -> None:
    """The run order comes first (run_job), and each function it runs, the shared bash the supervisor
    uses and STAGE are all defined above the PAYLOAD line: a reader never has to look below it."""
    top = render(SPECS[name]).partition(PAYLOAD_LINE)[0]
    order = top.partition("\nrun_job() {\n")[2].partition("\n}\n")[0]
    assert top.index("\nrun_job() {\n") < top.index("# ---- settings")
    steps = [line.split()[0] for line in order.splitlines() if not line.lstrip().startswith(("#", "trap"))]
    assert steps[0] == "prepare_log_dir" and steps[-1] == "finish", steps
    for step in steps:
        assert f"\n{step}() {{" in top, f"run_job runs {step}, defined below the PAYLOAD line"
    assert f'cat >"$STAGE/{protocol.SHARED_BASH}"' in top
    assert f'source "${{LOG_DIR}}/{protocol.SHARED_BASH}"' in top
    assert "\nSTAGE=" in top
