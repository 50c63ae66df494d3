"""Growing a running job on the minicluster (root), against a fresh job of the bigger size.

Each round: (a) a 2-node job with `--autoscale 4`, whose driver first sits idle for --rest seconds, then
asks for a STRICT_SPREAD placement group of 4 bundles (pending demand that only two more nodes can hold),
notes when each grow node appears in Ray and when the group is ready, then sits idle again for --rest
seconds with the grow nodes up; (b) a fresh 4-node job (raysub render) whose driver notes when it saw 4
nodes. Ray's autoscaler runs with its own defaults (an update every 5 s).

For (a), from the demand: 'decide' (-> the node provider's sbatch), 'queue' (sbatch -> the grow job's
batch script runs), 'bring-up' (-> the node is alive in Ray), and all of it (-> the group is ready). For (b),
sbatch -> the driver saw 4 nodes. And the Slurm commands the autoscaler's node provider ran per minute while
the cluster was at rest, without grow jobs and with two: each Slurm command on the head's PATH is a wrapper
that notes the call (the job's --setup puts them first).

    .venv/bin/python benchmarks/grow.py [--repeats 2] [--rest 60] [--json benchmarks/results/grow.json]
    .venv/bin/python benchmarks/grow.py --report benchmarks/results/grow.json   # the table of saved rounds

It brings the minicluster up if it is down, and takes it down again at the end in that case.
"""

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bringup_vs import run_job, wait_idle, warm_minicluster  # noqa: E402

from raysub import protocol  # noqa: E402
from raysub.protocol.logdir import LogDir  # noqa: E402
from tests.support.minicluster import MiniCluster  # noqa: E402

SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "sinfo")

# Rests, asks for the group and notes when each grow node (NODE_ID_AS_RESOURCE: its job id) is alive in
# Ray, rests again; then prints one line of times.
DRIVER = """
import json, sys, time
import ray
from ray.util.placement_group import placement_group
rest = float(sys.argv[1])
ray.init()
idle = [time.time()]
time.sleep(rest)
idle.append(time.time())
demand = time.time()
group = placement_group([{"CPU": 1}] * 4, strategy="STRICT_SPREAD")
seen = {}
ready = None
while ready is None:
    for node in ray.nodes():
        job = node["Resources"].get("NODE_ID_AS_RESOURCE")
        if node["Alive"] and job is not None:
            seen.setdefault(str(int(job)), time.time())
    done, _ = ray.wait([group.ready()], timeout=0.05)
    ready = time.time() if done else None
busy = [time.time()]
time.sleep(rest)
busy.append(time.time())
print("GROW " + json.dumps({"idle": idle, "demand": demand, "seen": seen, "ready": ready, "busy": busy}))
"""

# A Slurm command that notes each call ("<epoch seconds> <command>") in CALLS, then runs the real one.
WRAPPER = """#!/bin/bash
printf '%s %s\\n' "$EPOCHREALTIME" "${{0##*/}}" >>{calls}
exec {real} "$@"
"""


@dataclass
class Round:
    decide: list[float]  # demand -> the provider's sbatch, each grow job
    queue: list[float]  # sbatch -> its batch script ran
    bring_up: list[float]  # batch script -> the node alive in Ray
    grown: float  # demand -> the group ready
    fresh: float  # a fresh 4-node job: sbatch -> the driver saw 4 nodes
    calls_idle: dict[str, float]  # per minute, by command, at rest without grow jobs
    calls_busy: dict[str, float]  # per minute, by command, at rest with two


def wrappers(cluster: MiniCluster, where: Path) -> Path:
    """A directory of wrappers for Slurm's commands, and the file they note calls in."""
    where.mkdir()
    calls = where / "calls"
    for name in SLURM_COMMANDS:
        real = cluster.run("bash", "-c", f"command -v {name}").stdout.strip()
        path = where / name
        path.write_text(WRAPPER.format(calls=calls, real=real))
        path.chmod(0o755)
    return calls


def per_minute(calls: Path, window: list[float]) -> dict[str, float]:
    counted: dict[str, int] = dict.fromkeys(SLURM_COMMANDS, 0)
    for line in calls.read_text().splitlines() if calls.exists() else []:
        t, name = line.split()
        if window[0] <= float(t) < window[1]:
            counted[name] += 1
    return {name: n * 60 / (window[1] - window[0]) for name, n in counted.items() if n}


def grow_round(cluster: MiniCluster, work: Path, rest: float) -> tuple[dict[str, object], Path]:
    """The autoscaling job of a round: its driver's times, and the file of Slurm calls."""
    wait_idle(cluster)
    work.mkdir(parents=True)
    calls = wrappers(cluster, work / "slurm")
    (work / "driver.py").write_text(DRIVER)
    render = ["raysub", "render", "--nodes", "2", "--gpus-per-node", "0", "--autoscale", "4"]
    render += ["--autoscale-idle", "600", "--setup", f"export PATH={work / 'slurm'}:$PATH"]
    (work / "job.sub").write_text(cluster.run(*render, "--", "python", "driver.py", str(rest)).stdout)
    job_id = cluster.sbatch(work / "job.sub", "--nodelist=node[1-2]", "--time=10", "--exclusive", cwd=work)
    while cluster.is_queued(job_id):
        time.sleep(0.5)
    logs = LogDir.of(work, job_id)
    line = next(line for line in logs.driver_log.read_text().splitlines() if line.startswith("GROW "))
    times: dict[str, object] = json.loads(line.removeprefix("GROW "))
    submitted = [float(t) for t, name in map(str.split, calls.read_text().splitlines()) if name == "sbatch"]
    started = {
        directory.name: directory.stat().st_ctime
        for directory in (logs.path / protocol.GROW_DIR).iterdir()
        if directory.is_dir()
    }
    return {**times, "submitted": sorted(submitted), "started": started}, calls


def measure(cluster: MiniCluster, work: Path, rest: float) -> Round:
    grown, calls = grow_round(cluster, work / "grow", rest)
    fresh = run_job(cluster, "raysub", 4, work / "fresh")  # run_job makes only its own directory
    demand = float(grown["demand"])  # type: ignore[arg-type]
    seen: dict[str, float] = grown["seen"]  # type: ignore[assignment]
    started: dict[str, float] = grown["started"]  # type: ignore[assignment]
    submitted: list[float] = grown["submitted"]  # type: ignore[assignment]
    jobs = sorted(seen, key=seen.__getitem__)
    return Round(
        decide=[t - demand for t in submitted[: len(jobs)]],
        queue=[started[job] - t for job, t in zip(jobs, submitted, strict=False)],
        bring_up=[seen[job] - started[job] for job in jobs],
        grown=float(grown["ready"]) - demand,  # type: ignore[arg-type]
        fresh=fresh.whole,
        calls_idle=per_minute(calls, grown["idle"]),  # type: ignore[arg-type]
        calls_busy=per_minute(calls, grown["busy"]),  # type: ignore[arg-type]
    )


def table(rounds: list[Round]) -> str:
    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    def flat(field: str) -> list[float]:
        return [value for r in rounds for value in getattr(r, field)]

    def calls(field: str) -> str:
        names = sorted({name for r in rounds for name in getattr(r, field)})
        return ", ".join(
            f"{name} {median([getattr(r, field).get(name, 0.0) for r in rounds]):.1f}" for name in names
        )

    return "\n".join(
        [
            f"Medians over {len(rounds)} round(s), seconds. From pending demand (a group of 4 on 2 nodes):",
            f"  decide (-> the provider's sbatch)       {median(flat('decide')):6.1f}",
            f"  queue (sbatch -> batch script runs)     {median(flat('queue')):6.1f}",
            f"  bring-up (-> the node alive in Ray)     {median(flat('bring_up')):6.1f}",
            f"  all (-> the group ready)                {median([r.grown for r in rounds]):6.1f}",
            f"A fresh 4-node job: sbatch -> 4 nodes     {median([r.fresh for r in rounds]):6.1f}",
            "Slurm calls per minute by the autoscaler's provider, at rest:",
            f"  without grow jobs: {calls('calls_idle') or 'none'}",
            f"  with two grow jobs: {calls('calls_busy') or 'none'}",
            "  (raysub status --follow asks Slurm once every 2 s at most: 30 per minute)",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rest", type=float, default=60, help="seconds at rest, before and after")
    parser.add_argument("--json", type=Path, help="write every round here")
    parser.add_argument("--report", type=Path, help="only print the table of the rounds saved here")
    args = parser.parse_args()
    if args.report:
        print(table([Round(**r) for r in json.loads(args.report.read_text())["rounds"]]))
        return 0
    rounds: list[Round] = []
    started = time.time()
    with warm_minicluster(4, 2) as (cluster, tmp):
        for rep in range(args.repeats):
            rounds.append(measure(cluster, tmp / f"round-{rep}", args.rest))
            print(f"# {rounds[-1]}", file=sys.stderr, flush=True)
    print(table(rounds))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {"seconds": time.time() - started, "rest": args.rest, "rounds": [asdict(r) for r in rounds]}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
