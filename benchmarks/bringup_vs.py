"""Bring-up side by side on the minicluster (root): raysub against what users would otherwise pick.

After one job that warms the cluster up (not counted), for each N it submits, in turn (in an order that
rotates from round to round), (a) a job rendered by `raysub render`, (b) the pattern of Ray's documented
Slurm example (benchmarks/baselines/ray_docs.sbatch: head srun, a fixed sleep, one srun per worker with a
sleep each, the driver in the batch script) and (c) the bare limit (benchmarks/baselines/bare.sbatch: head
srun and ONE batched worker srun at once, a readiness file, no supervision). All run the same driver, which
notes when it saw every node alive. Medians over the repeats of: sbatch -> the driver sees all nodes,
driver exit -> job gone, job total, job steps; then raysub/bare and baseline/raysub.

    .venv/bin/python benchmarks/bringup_vs.py [--nodes 1,2,4,8] [--repeats 3]
        [--json benchmarks/results/bringup_vs.json] [--plot docs/bringup.png]

It brings the minicluster up with enough nodes if it is down, and takes it down again at the end in that
case; benchmarks/page_cache.py keeps Ray's files in memory meanwhile. The plot needs matplotlib (pip
install 'raysub[bench]').
"""

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub import protocol  # noqa: E402
from raysub.protocol.logdir import LogDir  # noqa: E402
from tests.support.minicluster import MiniCluster  # noqa: E402

BASELINES = REPO / "benchmarks" / "baselines"
KINDS = ("raysub", "ray_docs", "bare")

# Every kind runs this driver: it notes when it started and when it saw every node alive, then exits.
DRIVER = """
import sys, time
started = time.time()
import ray
ray.init()
nodes = int(sys.argv[1])
while sum(n["Alive"] for n in ray.nodes()) < nodes:
    time.sleep(0.05)
print(f"TIMES {started} {time.time()}", flush=True)
"""


# Put into every kind's batch script after its #SBATCH lines: when Slurm started it, in the submit dir.
STARTED = "bench_started"
STAMP = f"printf '%s\\n' \"$EPOCHREALTIME\" >{STARTED}\n"


@dataclass
class Run:
    kind: str
    nodes: int
    launch: float  # sbatch -> the batch script runs: Slurm's part, the same for every kind
    whole: float  # sbatch -> the driver saw every node alive
    gone: float  # the driver's exit -> the job left the queue
    total: float  # sbatch -> the job left the queue
    steps: int


def job_script(cluster: MiniCluster, kind: str, nodes: int) -> str:
    if kind == "raysub":
        render = ["raysub", "render", "--nodes", str(nodes), "--gpus-per-node", "0"]
        text = cluster.run(*render, "--", "python", "driver.py", str(nodes)).stdout
    else:
        text = (BASELINES / f"{kind}.sbatch").read_text()
    return stamped(text)


def stamped(script: str) -> str:
    """``script`` with STAMP after its shebang and #SBATCH lines (sbatch reads no #SBATCH after a command)."""
    lines = script.splitlines(keepends=True)
    at = 1 + max((k for k, line in enumerate(lines) if line.startswith("#SBATCH")), default=0)
    return "".join([*lines[:at], STAMP, *lines[at:]])


# What is left of a job's Ray: its binaries, its Python processes (which rename themselves ray::...) and
# the Python programs under Ray's package directory.
RAY_PROCESSES = r"raylet|gcs_server|^ray::|site-packages/ray/"


def wait_idle(cluster: MiniCluster, timeout: float = 120) -> None:
    """Every node idle again and no Ray process left: a job submitted while the last one's nodes still
    complete waits for them, and one that starts while the last one's Ray still exits shares the CPU
    with it; either would count against whichever kind came next."""
    deadline = time.monotonic() + timeout
    while (
        set(cluster.run("sinfo", "-h", "-N", "-o", "%T").stdout.split()) != {"idle"}
        or subprocess.run(["pgrep", "-f", RAY_PROCESSES], capture_output=True, check=False).returncode == 0
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the minicluster did not become idle (nodes, or Ray processes left)")
        time.sleep(0.1)


def run_job(cluster: MiniCluster, kind: str, nodes: int, work: Path) -> Run:
    wait_idle(cluster)
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    (work / "job.sub").write_text(job_script(cluster, kind, nodes))
    submitted = time.time()
    job_id = cluster.sbatch(work / "job.sub", f"--nodes={nodes}", "--time=5", "--exclusive", cwd=work)
    while cluster.is_queued(job_id):
        time.sleep(0.05)
    left = time.time()
    result = cluster.job(job_id)
    if result.exit_code != 0:
        raise RuntimeError(f"{kind} job {job_id} failed: {result}; see {work}")
    if kind == "raysub":
        logs = LogDir.of(work, job_id)
        driver_log, driver_end = logs.driver_log, logs.file(protocol.DRIVER_EXIT_CODE).stat().st_mtime
    else:
        driver_log, driver_end = work / "driver.log", (work / "driver_done").stat().st_mtime
    line = next(line for line in driver_log.read_text().splitlines() if line.startswith("TIMES "))
    whole = float(line.split()[2])
    launch = float((work / STARTED).read_text()) - submitted
    return Run(
        kind, nodes, launch, whole - submitted, left - driver_end, left - submitted, cluster.steps(job_id)
    )


def medians(runs: list[Run], kind: str, nodes: int) -> dict[str, float]:
    mine = [r for r in runs if r.kind == kind and r.nodes == nodes]
    fields = ("launch", "whole", "gone", "total", "steps")
    medians = {f: statistics.median(getattr(r, f) for r in mine) for f in fields}
    # The bring-up itself: from the batch script's start, run by run (Slurm's launch varies by seconds).
    return {**medians, "after_launch": statistics.median(r.whole - r.launch for r in mine)}


@contextlib.contextmanager
def page_cache_kept() -> Iterator[None]:
    """benchmarks/page_cache.py runs meanwhile: the files Ray's nodes read stay in memory (it says why)."""
    keeper = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "page_cache.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert keeper.stdin is not None and keeper.stdout is not None
    said = keeper.stdout.readline().strip()
    print(
        f"# {said or 'page_cache.py failed (see above); the runs go on without it'}",
        file=sys.stderr,
        flush=True,
    )
    try:
        yield
    finally:
        keeper.stdin.close()
        keeper.wait(timeout=30)


@contextlib.contextmanager
def warm_minicluster(nodes: int, warm_up_nodes: int) -> Iterator[tuple[MiniCluster, Path]]:
    """The minicluster with ``nodes`` nodes (brought up if down, and down again after), Ray's files kept in
    memory, and a directory for the runs, after a job of ``warm_up_nodes`` nodes that is not counted: the
    first job after the cluster came up finds Ray's files cold, whatever its kind."""
    # Each node on a CPU of its own, in turn (scripts/minicluster up --pin): on a real cluster no node's
    # start takes CPU from another's, and a script that overlaps them must be able to show it.
    cluster = MiniCluster(REPO / ".minicluster", nodes=nodes, pin=True)
    was_up = cluster.script("status", check=False).returncode == 0
    cluster.up()
    try:
        with page_cache_kept(), tempfile.TemporaryDirectory(prefix="raysub-bench-") as tmp:
            run_job(cluster, "bare", warm_up_nodes, Path(tmp) / "warm-up")
            yield cluster, Path(tmp)
    finally:
        if not was_up:
            cluster.down()


def table(runs: list[Run], counts: list[int]) -> tuple[str, list[dict[str, object]]]:
    lines = [
        "Medians in seconds. whole: sbatch -> the driver saw every node; gone: driver exit -> job gone;",
        "total: sbatch -> job gone; launch: sbatch -> the batch script ran (Slurm's part);",
        "after: whole - launch, run by run.",
        "vs bare and vs raysub compare 'whole'; 'after' vs bare compares the bring-up after Slurm's launch,",
        "which Slurm 22.05 starts at its next once-a-second scheduling pass: 0-1 s, whatever the job.",
        f"{'N':>2} {'kind':<9}{'whole':>7}{'gone':>6}{'total':>7}{'steps':>6}{'launch':>7}{'after':>7}"
        f"{'vs bare':>9}{'vs raysub':>10}{'after vs bare':>14}",
    ]
    rows: list[dict[str, object]] = []
    for nodes in counts:
        per_kind = {kind: medians(runs, kind, nodes) for kind in KINDS}
        bare = per_kind["bare"]
        for kind in KINDS:
            m = per_kind[kind]
            ratios = {
                "vs_bare": m["whole"] / bare["whole"],
                "vs_raysub": m["whole"] / per_kind["raysub"]["whole"],
                "after_vs_bare": m["after_launch"] / bare["after_launch"],
            }
            lines.append(
                f"{nodes:>2} {kind:<9}{m['whole']:>7.2f}{m['gone']:>6.2f}{m['total']:>7.2f}{m['steps']:>6.0f}"
                f"{m['launch']:>7.2f}{m['after_launch']:>7.2f}{ratios['vs_bare']:>8.2f}x"
                f"{ratios['vs_raysub']:>9.2f}x{ratios['after_vs_bare']:>13.2f}x"
            )
            rows.append({"nodes": nodes, "kind": kind, **m, **ratios})
    return "\n".join(lines), rows


def plot(rows: list[dict[str, object]], path: Path) -> None:
    """Bring-up time and job steps against N, one line per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        nodes = [r["nodes"] for r in mine]
        left.plot(nodes, [r["whole"] for r in mine], marker="o", label=kind)
        right.plot(nodes, [r["steps"] for r in mine], marker="o", label=kind)
    left.set(xlabel="nodes", ylabel="seconds, sbatch -> driver sees every node", title="Bring-up")
    right.set(xlabel="nodes", ylabel="job steps (srun calls)", title="Job steps")
    for axes in (left, right):
        axes.legend()
        axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", default="1,2,4,8")
    parser.add_argument("--json", type=Path, help="write the medians and every run here")
    parser.add_argument("--plot", type=Path, help="draw bring-up time and job steps against N here (PNG)")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    runs: list[Run] = []
    started = time.time()
    with warm_minicluster(max(4, *counts), min(counts)) as (cluster, tmp):
        for nodes in counts:
            for rep in range(args.repeats):
                # In turn, so that a slow spell of the machine hits every kind, and in an order that
                # rotates, so that no kind always follows the same one (ray_docs leaves the most behind).
                for kind in KINDS[rep % len(KINDS) :] + KINDS[: rep % len(KINDS)]:
                    runs.append(run_job(cluster, kind, nodes, tmp / f"{kind}-{nodes}-{rep}"))
                    print(f"# {runs[-1]}", file=sys.stderr, flush=True)
    text, rows = table(runs, counts)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {"seconds": time.time() - started, "medians": rows, "runs": [asdict(r) for r in runs]}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
