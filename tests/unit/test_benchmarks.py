"""The benchmarks keep working: each runs small here. Their targets are for the tables they print, never
timed by a test."""

import json
import subprocess
import sys
from pathlib import Path

from tests.support.prereq import REPO, tool


def run_benchmark(program: str, *args: str) -> str:
    """What ``benchmarks/<program>`` prints, run as its docstring says, from the top of the tree."""
    done = subprocess.run(
        [sys.executable, f"benchmarks/{program}", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_the_log_reading_benchmark_reads_every_step_and_meets_its_target(tmp_path: Path) -> None:
    results = tmp_path / "log_reading.json"
    run_benchmark("log_reading.py", "--steps", "200", "--between", "0", "50", "--json", str(results))
    rows = json.loads(results.read_text())["results"]
    assert [(row["between"], row["steps_read"], row["within_target"]) for row in rows] == [
        (0, 200, None),
        (50, 200, True),
    ]


def test_the_monitor_benchmark_runs() -> None:
    assert "one cycle, 4 endpoints" in run_benchmark("monitor.py", "--endpoints", "4", "--repeats", "1")


def test_the_scale_simulation_starts_8_nodes_with_two_job_steps(tmp_path: Path) -> None:
    tool("strace")
    results = tmp_path / "scale_sim.json"
    # The head starts 2 s after the last worker's canary: with 0, a loaded machine let a traced worker reach
    # its first look only once the head was ready, one look and no ops per look to measure.
    out = run_benchmark(
        "scale_sim.py", "--nodes", "8", "--head-delay", "2", "--driver-seconds", "0", "--trace-workers", "2",
        "--nice", "0", "--json", str(results),
    )  # fmt: skip
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["N", "srun", "scontrol", "squeue"]
    # scontrol twice: the job's node names (no RPC) and, for the workers' order, Slurm's topology.
    assert row.split()[:4] == ["8", "2", "2", "0"]
    [run] = json.loads(results.read_text())["runs"]
    assert run["calls"] == {"srun": 2, "scontrol": 2, "squeue": 0, "sbatch": 0}
    assert (run["exit_status"], run["ended"]) == (0, "driver exited with status 0")
    assert run["ray_nodes_started"] == 8
    assert run["workers"]["analysed"] == 2
    assert run["workers"]["ops_per_poll_median"] is not None


def test_the_recovery_benchmark_reports_its_saved_runs(tmp_path: Path) -> None:
    # Its runs need the minicluster (benchmarks/run-all); its table comes from what they saved.
    copy = tmp_path / "recovery.json"
    out = run_benchmark("recovery.py", "--report", "benchmarks/results/recovery.json", "--json", str(copy))
    rows = [line.split() for line in out.splitlines()]
    kinds = {row[1] for row in rows if len(row) > 2 and row[0] in ("2", "4")}
    assert kinds == {"in_alloc", "resubmit", "watch"}, out
    assert json.loads(copy.read_text())["complete"] is True


def test_the_grow_benchmark_reports_its_saved_rounds() -> None:
    # Its rounds need the minicluster (benchmarks/run-all); its table comes from what they saved.
    out = run_benchmark("grow.py", "--report", "benchmarks/results/grow.json")
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "Medians over 2 round(s), seconds. From pending demand (a group of 4 on 2 nodes):"
    assert [line.rsplit(None, 1)[0] for line in lines[1:6]] == [
        "decide (-> the provider's sbatch)",
        "queue (sbatch -> batch script runs)",
        "bring-up (-> the node alive in Ray)",
        "all (-> the group ready)",
        "A fresh 4-node job: sbatch -> 4 nodes",
    ]
    assert all(float(line.split()[-1]) > 0 for line in lines[1:6]), out
    assert lines[7:9] == ["without grow jobs: none", "with two grow jobs: squeue 2.0"]
