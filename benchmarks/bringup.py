"""Bring-up benchmark on the minicluster (root): raysub's rendered job against a bare reference job.

For N = 1, 2, 4 nodes it submits, alternately, a raysub job and a bare reference job (head srun, ONE
batched worker srun, a readiness file, no supervision, a driver that polls until every node is alive),
both running the same driver, and prints seconds from submission to each phase. The target: at N=4,
raysub's driver has the whole cluster within 1.15x of the bare job's time, and the job is gone within
2 s of the driver's exit.

    python benchmarks/bringup.py [--repeats 3] [--nodes 1,2,4]

It brings the minicluster up if it is down, and down again at the end in that case.
"""

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub import protocol  # noqa: E402
from tests.support.minicluster import MiniCluster  # noqa: E402

# Both kinds run this driver: it notes when it started and when it saw every node alive, then exits.
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

# Same Ray options as raysub's defaults, minus the supervision: the reference for bring-up speed.
BARE_JOB = r"""#!/bin/bash
set -euo pipefail
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head=${nodes[0]}
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0 TMP_BASE="/tmp/rb-${SLURM_JOB_ID}" HEAD_IP
HEAD_IP=$(getent ahostsv4 "$head" | awk '{ print $1; exit }')
start='t="$TMP_BASE/$(hostname)"; mkdir -p "$t"; export TMPDIR=$t;
  ip=$(getent ahostsv4 "$(hostname)" | awk "{ print \$1; exit }");
  exec ray start --block --temp-dir="$t" --node-ip-address="$ip" --num-gpus=0 --disable-usage-stats'
srun --overlap --nodes=1 --ntasks=1 --nodelist="$head" --output=head.log bash -c "$start --head --port=6379" &
until [[ -e $TMP_BASE/$head/ray_current_cluster ]] && ray health-check --address "$HEAD_IP:6379" 2>/dev/null
do sleep 0.1; done
touch head_ready
if ((SLURM_JOB_NUM_NODES > 1)); then
  workers=$((SLURM_JOB_NUM_NODES - 1))
  srun --overlap --nodes="$workers" --ntasks="$workers" --exclude="$head" --output=worker-%t.log \
    bash -c "$start --address=$HEAD_IP:6379" &
fi
RAY_ADDRESS="$HEAD_IP:6379" python driver.py "$SLURM_JOB_NUM_NODES" >driver.log 2>&1
touch driver_done
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$TMP_BASE"' EXIT
"""


@dataclass
class Run:
    kind: str
    nodes: int
    head_ready: float
    driver_start: float
    cluster_whole: float
    gone_after_driver: float
    steps: int


def driver_times(log: Path) -> tuple[float, float]:
    line = next(line for line in log.read_text().splitlines() if line.startswith("TIMES "))
    started, whole = line.split()[1:]
    return float(started), float(whole)


def run_job(cluster: MiniCluster, kind: str, nodes: int, work: Path) -> Run:
    work.mkdir()
    (work / "driver.py").write_text(DRIVER)
    if kind == "raysub":
        rendered = cluster.run(
            "raysub",
            "render",
            "--nodes",
            str(nodes),
            "--gpus-per-node",
            "0",
            "--",
            "python",
            "driver.py",
            str(nodes),
        )
        (work / "job.sub").write_text(rendered.stdout)
    else:
        (work / "job.sub").write_text(BARE_JOB)
    submitted = time.time()
    job_id = cluster.sbatch(work / "job.sub", f"--nodes={nodes}", "--time=5", "--exclusive", cwd=work)
    while cluster.is_queued(job_id):
        time.sleep(0.05)
    gone = time.time()
    result = cluster.job(job_id)
    if result.exit_code != 0:
        raise RuntimeError(f"{kind} job {job_id} failed: {result}; see {work}")
    if kind == "raysub":
        logs = protocol.LogDir.of(work, job_id)
        head_ready = logs.started_ray_head.stat().st_mtime
        driver_log, driver_end = logs.driver_log, logs.file(protocol.DRIVER_EXIT_CODE).stat().st_mtime
    else:
        head_ready = (work / "head_ready").stat().st_mtime
        driver_log, driver_end = work / "driver.log", (work / "driver_done").stat().st_mtime
    started, whole = driver_times(driver_log)
    return Run(
        kind,
        nodes,
        head_ready - submitted,
        started - submitted,
        whole - submitted,
        gone - driver_end,
        cluster.steps(job_id),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", default="1,2,4")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    cluster = MiniCluster(REPO / ".minicluster", nodes=max(4, *counts))
    was_up = cluster.script("status", check=False).returncode == 0
    cluster.up()
    runs: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="raysub-bench-") as tmp:
            for nodes in counts:
                for rep in range(args.repeats):
                    for kind in ("raysub", "bare"):
                        runs.append(run_job(cluster, kind, nodes, Path(tmp) / f"{kind}-{nodes}-{rep}"))
                        print(f"# {runs[-1]}", file=sys.stderr)
    finally:
        if not was_up:
            cluster.down()
    report(runs, counts)


COLUMNS = {
    "head_ready": "head ready",
    "driver_start": "driver start",
    "cluster_whole": "cluster whole",
    "gone_after_driver": "job gone",
}


def report(runs: list[Run], counts: list[int]) -> None:
    """Medians per node count and kind, then the ratio the target is about."""
    print("Medians in seconds after sbatch; 'job gone' is after the driver's exit; 'cluster whole' is when")
    print(
        "the driver saw every node alive. raysub starts its driver only then; the bare driver starts at once."
    )
    print(f"{'N':>2} {'kind':<7}" + "".join(f" {title:>13}" for title in COLUMNS.values()) + f" {'steps':>6}")
    for nodes in counts:
        medians: dict[str, dict[str, float]] = {}
        for kind in ("raysub", "bare"):
            mine = [r for r in runs if r.nodes == nodes and r.kind == kind]
            medians[kind] = {field: statistics.median(getattr(r, field) for r in mine) for field in COLUMNS}
            steps = "/".join(str(n) for n in sorted({r.steps for r in mine}))
            cells = "".join(f" {medians[kind][field]:>13.2f}" for field in COLUMNS)
            print(f"{nodes:>2} {kind:<7}{cells} {steps:>6}")
        ratio = medians["raysub"]["driver_start"] / medians["bare"]["cluster_whole"]
        print(f"{nodes:>2} raysub driver start / bare cluster whole: {ratio:.2f}x (target at N=4: <= 1.15x)")


if __name__ == "__main__":
    main()
