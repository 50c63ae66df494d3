"""The node programs (raysub/job/programs/): what they may import, that LOG_DIR's copy runs with a Python that
has no raysub, and the unit counter against a fake GCS client with the real one's shape."""

import ast
import os
import shutil
import subprocess
import sys
import threading
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raysub import protocol
from raysub.job.lib import counter, gcs
from raysub.job.manifest import timing_args
from raysub.job.programs import monitor, units
from raysub.job.render import node_library
from raysub.protocol.logdir import LogDir
from raysub.spec import JobSpec
from tests.support.batch import run_batch_script

TIMING = timing_args(JobSpec(nodes=2).timing, "units")
SHIPPED = {name.removeprefix(f"{protocol.NODE_PYTHON_DIR}/"): path for name, path in node_library()}
# What Ray's Python has besides the standard library (prometheus_client comes with ray[default]).
THIRD_PARTY = {"ray", "prometheus_client"}
# What a shipped module may use where it is installed: imported inside a function, never at the top.
OPTIONAL = {"raysub/job/programs/smoke.py": {"torch"}}


def module_name(relative: str) -> str:
    return relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("relative", sorted(SHIPPED))
def test_a_shipped_module_imports_only_what_a_node_has(relative: str) -> None:
    shipped = {module_name(name) for name in SHIPPED}
    for name in imports(SHIPPED[relative]):
        top = name.split(".")[0]
        if top == "raysub":
            # "from raysub import protocol" names a module; "from raysub.x import y" names something in x.
            assert name in shipped or name.rpartition(".")[0] in shipped, f"{relative} imports {name}"
        else:
            allowed = sys.stdlib_module_names | THIRD_PARTY | OPTIONAL.get(relative, set()) | {"__future__"}
            assert top in allowed, f"{relative} imports {name}"


@pytest.mark.parametrize("relative", sorted(OPTIONAL))
def test_an_optional_package_is_imported_only_where_it_is_used(relative: str) -> None:
    tree = ast.parse(SHIPPED[relative].read_text())
    top_level = {
        alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names
    }
    top_level |= {
        node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not top_level & OPTIONAL[relative]


def test_every_node_module_is_shipped() -> None:
    package = Path(units.__file__).parent
    assert set(package.glob("*.py")) == {path for path in SHIPPED.values() if path.parent == package}


def test_log_dirs_copy_runs_with_a_python_without_raysub(tmp_path: Path) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    probe = [python or "python3", "-c", "import raysub"]
    if (
        python is None
        or subprocess.run(probe, cwd=tmp_path, capture_output=True, check=False).returncode == 0
    ):
        pytest.skip("needs a python3 in /usr/bin without raysub")
    spec = JobSpec(nodes=2, gpus_per_node=0, command=("true",), interface="lo", log_dir="runs", monitor=False)
    job = run_batch_script(tmp_path, spec, {"HOME": str(tmp_path)}, str(os.getpid()))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(job.log_dir.file(protocol.NODE_PYTHON_DIR))}
    # Only what the job uses is shipped: this job runs no smoke test (tests/golden/smoke.diff ships it).
    assert not job.log_dir.file(f"{protocol.NODE_PYTHON_DIR}/raysub/job/programs/smoke.py").exists()
    for program in ("units", "preflight"):
        done = subprocess.run(
            [python, "-m", f"raysub.job.programs.{program}", "--help"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "--log-dir" in done.stdout


# ---- the unit counter, with a client shaped like ray._raylet.GcsClient ----


def node_info(name: str, gpus: float, state: int = gcs.ALIVE) -> SimpleNamespace:
    return SimpleNamespace(
        node_name=name,
        node_manager_address=f"10.0.0.{len(name)}",
        metrics_export_port=8080,
        state=state,
        resources_total={"GPU": gpus, "CPU": 8.0},
    )


class FakeGcs:
    """Answers each get_all_node_info with the next of ``answers`` (an exception is raised)."""

    def __init__(self, answers: list[Any], logs: LogDir) -> None:
        self.answers = answers
        self.logs = logs

    def get_all_node_info(self, timeout: float) -> dict[str, Any]:
        assert timeout == gcs.GCS_TIMEOUT_S
        answer = self.answers.pop(0)
        if not self.answers:  # the last answer: the job ends after it
            self.logs.ended.write_text("done\n")
        if isinstance(answer, Exception):
            raise answer
        return {f"id{k}": info for k, info in enumerate(answer)}


def arguments(logs: LogDir, kind: str = "gpu", auth: str = "none", *more: str) -> Namespace:
    parse = monitor.parse if more else units.parse
    return parse(
        [f"--log-dir={logs.path}", f"--address-file={logs.path / 'address'}", "--expected=16",
         f"--kind={kind}", f"--auth={auth}", "--node=node1", *TIMING, *more]
    )  # fmt: skip


def test_the_counter_publishes_units_nodes_and_joins(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    answers: list[Any] = [
        [node_info("node1", 8)],
        RuntimeError("the GCS is busy"),  # a failed read changes nothing
        [node_info("node1", 8), node_info("node2", 8), node_info("gone", 8, state=1)],
    ]
    sleeps: list[float] = []
    counter.count(arguments(logs), FakeGcs(answers, logs), "10.0.0.1:6379", sleep=sleeps.append)
    assert logs.units() == 16
    assert logs.joined_nodes() == ["node1", "node2"]
    joined = [(e.phase, e.node, e.detail) for e in logs.timeline()]
    assert joined == [(protocol.PHASE_WORKER_JOINED, "node1", n) for n in ("node1", "node2")]
    timing = JobSpec(nodes=2).timing
    assert sleeps == [
        timing.units_brisk_s,
        timing.units_brisk_s,
        timing.units_slow_s,
    ]  # slow once all 16 GPUs joined


def test_the_counter_starts_the_monitor_sidecar_once_every_unit_joined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogDir(tmp_path)
    started: list[tuple[object, ...]] = []
    monkeypatch.setattr(monitor, "gcs_endpoints", lambda address: f"endpoints of {address}")
    monkeypatch.setattr(
        monitor,
        "start",
        lambda _logs, node, interval, idle, endpoints, going: started.append(
            (node, interval, idle.threshold, idle.after, endpoints, logs.units())
        ),
    )
    both = [node_info("node1", 8), node_info("node2", 8)]
    answers: list[Any] = [[node_info("node1", 8)], both, both, both]
    args = arguments(logs, "gpu", "none", "--monitor-interval=2.5", "--idle-threshold=3", "--idle-after=60")
    counter.count(args, FakeGcs(answers, logs), "10.0.0.1:6379", monitor.sidecar(args), lambda seconds: None)
    assert started == [("node1", 2.5, 3.0, 60.0, "endpoints of 10.0.0.1:6379", 16)]


def test_without_gpus_the_counter_counts_nodes(tmp_path: Path) -> None:
    logs = LogDir(tmp_path)
    two = FakeGcs([[node_info("a", 0), node_info("b", 0)]], logs)
    counter.count(arguments(logs, kind="node"), two, "10.0.0.1:6379", sleep=print)
    assert logs.units() == 2


def main_argv(logs: LogDir, auth: str = "none") -> list[str]:
    address_file = logs.path / "raysub_head_address"
    return [f"--log-dir={logs.path}", f"--address-file={address_file}", "--expected=1", "--kind=gpu",
            f"--auth={auth}", "--node=n", *TIMING]  # fmt: skip


def test_it_loads_ray_first_then_waits_for_the_heads_address_and_reads_that_gcs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogDir(tmp_path)
    calls: list[str] = []
    monkeypatch.setattr(gcs, "load", lambda: calls.append("load"))

    def connect(address: str) -> str:
        calls.append(f"connect {address}")
        return "client"

    monkeypatch.setattr(gcs, "connect", connect)
    monkeypatch.setattr(
        counter, "count", lambda args, client, address, on_whole: calls.append(f"count {client} {address}")
    )
    arrive = threading.Timer(
        0.3, protocol.write_atomic, args=(tmp_path / "raysub_head_address", "10.0.0.1:6379\n")
    )
    arrive.start()
    try:
        assert counter.run(units.parse(main_argv(logs))) == 0
    finally:
        arrive.join()
    assert calls == ["load", "connect 10.0.0.1:6379", "count client 10.0.0.1:6379"]


def test_a_ray_that_does_not_enforce_the_token_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gcs, "load", lambda: None)
    monkeypatch.setattr(gcs, "connect", lambda address: object())
    monkeypatch.setattr(counter, "token_enforced", lambda: False)
    monkeypatch.setattr(counter, "loaded_ray_version", lambda: "2.49.2")
    logs = LogDir(tmp_path)
    protocol.write_atomic(tmp_path / "raysub_head_address", "10.0.0.1:6379\n")
    assert counter.run(units.parse(main_argv(logs, auth="token"))) == counter.UNPROTECTED
    assert capsys.readouterr().out == "unprotected 2.49.2\n"
    assert logs.units() is None


def test_an_error_is_its_last_word_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_ray() -> None:
        raise ModuleNotFoundError("No module named 'ray'\n(and more)")

    monkeypatch.setattr(gcs, "load", no_ray)
    with pytest.raises(ModuleNotFoundError):
        counter.run(units.parse(main_argv(LogDir(tmp_path))))  # at once: it never waits for the head
    assert capsys.readouterr().out == "ModuleNotFoundError: No module named 'ray' (and more)\n"
