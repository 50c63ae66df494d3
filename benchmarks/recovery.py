"""Recovery from a driver crash on the minicluster (root): how long from the crash until the next driver's
ray.init returns, three ways.

  in_alloc  a job rendered with --driver-restarts 1 --restart-backoff 1: the head runs the driver again in
            the same allocation (no queue, no new bring-up).
  watch     `raysub watch JOB_SCRIPT --backoff 1 --backoff-max 2 --interval 2` resubmits the failed job.
  resubmit  benchmarks/baselines/resubmit.sh: sbatch again as soon as squeue no longer lists the job
            (it asks every second), as a user would script it by hand.

Every kind runs the same driver: its first run calls ray.init, notes the time and exits 1 (the crash);
its next run notes the time right after ray.init returns (ready). recovery = ready - crash, minus, for
watch and resubmit, the next job's queue wait: its sbatch (once it has returned) to the first line of
its batch script's timeline (job_start), which holds Slurm's scheduling pass and the batch launch too.
The stretches that add up to it (PARTS below) come from the files the driver writes (the crashed one
also notes when its exit handlers, Ray's shutdown among them, are done), LOG_DIR/timeline.jsonl
(driver_cleanup, driver_restart, job_start, driver_start), the watch state file, resubmit.sh's output,
and squeue, which this program asks every 0.25 s to see when a job left the queue. Medians and min-max
over the repeats; the kinds take turns, in an order that rotates from round to round.

    .venv/bin/python benchmarks/recovery.py [--nodes 2,4] [--repeats 5]
        [--json benchmarks/results/recovery.json] [--plot docs/recovery.png]

It brings the minicluster up pinned (as bringup_vs.py) with enough nodes, and down again at the end if
it was down; benchmarks/page_cache.py keeps Ray's files in memory meanwhile. The plot needs matplotlib
(pip install 'raysub[bench]').
"""

import argparse
import contextlib
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bringup_vs import page_cache_kept  # noqa: E402

from raysub import protocol  # noqa: E402
from raysub.protocol.logdir import LogDir  # noqa: E402
from tests.support.minicluster import MiniCluster  # noqa: E402

KINDS = ("in_alloc", "watch", "resubmit")
RESUBMIT = REPO / "benchmarks" / "baselines" / "resubmit.sh"
WATCH_OPTIONS = ("--backoff", "1", "--backoff-max", "2", "--interval", "2")
RESTART_OPTIONS = ("--driver-restarts", "1", "--restart-backoff", "1")
QUEUE_POLL = 0.25  # seconds between this program's own looks at squeue

# The first run (no crashed file yet) crashes once connected: it notes when, exits 1, and notes when its
# last exit handler ran (registered before Ray's, so after Ray's shutdown). The next notes when its
# ray.init returned.
DRIVER = """
import atexit, sys, time
from pathlib import Path
started = time.time()
out = Path(sys.argv[1])
crashing = not (out / "crashed").exists()
if crashing:
    atexit.register(lambda: (out / "exited").write_text(f"{time.time()}\\n"))
import ray
ray.init()
ready = time.time()
if crashing:
    (out / "crashed").write_text(f"{started} {ready} {time.time()}\\n")
    sys.exit(1)
(out / "recovered").write_text(f"{started} {ready}\\n")
"""
CRASHED, EXITED, RECOVERED = "crashed", "exited", "recovered"


@dataclass
class Run:
    kind: str
    nodes: int
    rep: int
    jobs: list[int]
    recovery: float  # crash -> the next driver's ray.init returned, minus the queue wait
    total: float  # crash -> the next driver's ray.init returned
    queue: float  # the next job's sbatch returned -> its job_start (0 within the allocation)
    # Consecutive stretches that add up to recovery (PARTS), and a few more; None where a file is missing.
    parts: dict[str, float | None] = field(default_factory=dict)
    pending_s: int | None = None  # scontrol's StartTime - SubmitTime of the next job (whole seconds)
    load: float = 0.0  # the machine's 1-minute load average as the run started


# The stretches of each kind, in order: they add up to its recovery.
#   exit: crash -> the crashed driver's last exit handler ran (Ray's shutdown in the driver)
#   in_alloc: clear: exit -> driver_cleanup (the head saw the exit, stopped the run's processes and ran
#             its clean-up); backoff: driver_cleanup -> driver_restart (what is left of --restart-backoff,
#             which counts from before the clean-up); init: driver_restart -> ray.init returned
#   watch, resubmit: notice: exit -> the resubmitter saw the job over (watch: a poll that found it
#             ended; resubmit: the first empty squeue); submit: seen over -> the next sbatch returned
#             (watch: its backoff too); then the queue wait, left out; bring_up: the next job's job_start
#             -> ray.init returned
PARTS = {
    "in_alloc": ("exit", "clear", "backoff", "init"),
    "watch": ("exit", "notice", "submit", "bring_up"),
    "resubmit": ("exit", "notice", "submit", "bring_up"),
}
# Not part of the sum: gone: crash -> the job left squeue (this program's look); driver_start: the next
# job's job_start -> its timeline's driver_start.
EXTRA = ("gone", "driver_start")


class QueueLooks(threading.Thread):
    """Asks squeue every QUEUE_POLL seconds which jobs it lists; ``gone[job]`` is the first look that no
    longer listed a job an earlier one did."""

    def __init__(self, cluster: MiniCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.seen: set[int] = set()
        self.gone: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            out = self.cluster.run("squeue", "-h", "-o", "%i", check=False)
            now = time.time()
            if out.returncode == 0:
                listed = {int(word) for word in out.stdout.split() if word.isdigit()}
                for job in self.seen - listed:
                    self.gone.setdefault(job, now)
                self.seen |= listed
            self.done.wait(QUEUE_POLL)

    def stop(self) -> None:
        self.done.set()
        self.join()


def numbers(path: Path) -> list[float]:
    return [float(word) for word in path.read_text().split()]


def driver_times(work: Path) -> tuple[float, float, float]:
    """When the first driver crashed and when its exit handlers were done; when the next one's ray.init
    returned."""
    out = work / "out"
    return numbers(out / CRASHED)[2], numbers(out / EXITED)[0], numbers(out / RECOVERED)[1]


def timeline(work: Path, job_id: int) -> dict[str, list[float]]:
    """When each phase of the job's timeline happened, in file order."""
    times: dict[str, list[float]] = {}
    for event in LogDir.of(work, job_id).timeline():
        times.setdefault(event.phase, []).append(event.t)
    return times


def first(times: dict[str, list[float]], phase: str) -> float | None:
    return times[phase][0] if times.get(phase) else None


def since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def slurm_time(text: str, key: str) -> float:
    found = re.search(rf"\b{key}=(\S+)", text)
    if not found:
        raise ValueError(f"no {key} in {text!r}")
    return datetime.fromisoformat(found.group(1)).timestamp()


def pending_seconds(cluster: MiniCluster, job_id: int) -> int:
    text = cluster.run("scontrol", "-o", "show", "job", str(job_id)).stdout
    return round(slurm_time(text, "StartTime") - slurm_time(text, "SubmitTime"))


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def prepare(cluster: MiniCluster, work: Path, nodes: int, *render: str) -> Path:
    """work/driver.py, work/out/ and work/job.sub, rendered for ``nodes`` with ``render`` options."""
    work.mkdir()
    (work / "out").mkdir()
    (work / "driver.py").write_text(DRIVER)
    command = ["python", str(work / "driver.py"), str(work / "out")]
    options = ["--nodes", str(nodes), "--gpus-per-node", "0", "--time=5", *render]
    script = work / "job.sub"
    script.write_text(cluster.run("raysub", "render", *options, "--", *command).stdout)
    return script


def checked(cluster: MiniCluster, work: Path, job_id: int, want: int) -> None:
    result = cluster.job(job_id)
    if result.exit_code != want:
        raise RuntimeError(f"job {job_id} ended {result}, not with exit code {want}; see {work}")


def in_alloc(cluster: MiniCluster, work: Path, nodes: int, rep: int, looks: QueueLooks) -> Run:
    script = prepare(cluster, work, nodes, *RESTART_OPTIONS)
    load = load_average()
    job_id = cluster.sbatch(script, cwd=work)
    cluster.wait(job_id, timeout=300)
    checked(cluster, work, job_id, 0)
    crash, exited, ready = driver_times(work)
    times = timeline(work, job_id)
    cleared = first(times, protocol.PHASE_DRIVER_CLEANUP)
    restarted = first(times, protocol.PHASE_DRIVER_RESTART)
    parts = {
        "exit": exited - crash,
        "clear": since(exited, cleared),
        "backoff": since(cleared, restarted),
        "init": since(restarted, ready),
    }
    return Run("in_alloc", nodes, rep, [job_id], ready - crash, ready - crash, 0.0, parts, None, load)


def watch(cluster: MiniCluster, work: Path, nodes: int, rep: int, looks: QueueLooks) -> Run:
    script = prepare(cluster, work, nodes)
    load = load_average()
    done = cluster.run("raysub", "watch", str(script), *WATCH_OPTIONS, cwd=work, check=False, timeout=420)
    if done.returncode != 0:
        raise RuntimeError(f"raysub watch exited with {done.returncode}: {done.stdout[-2000:]}")
    state = json.loads(script.with_name(f"{script.name}.watch.json").read_text())
    crashed, next_job = state["history"][0], state["history"][1]
    jobs = (int(crashed["job_id"]), int(next_job["job_id"]))
    seen_over, submitted = float(crashed["ended_at"]), float(next_job["submitted_at"])
    return resubmitted("watch", cluster, work, nodes, rep, looks, jobs, seen_over, submitted, load)


def resubmit(cluster: MiniCluster, work: Path, nodes: int, rep: int, looks: QueueLooks) -> Run:
    script = prepare(cluster, work, nodes)
    load = load_average()
    said = cluster.run("bash", str(RESUBMIT), str(script), cwd=work, timeout=420).stdout
    events = [line.split() for line in said.splitlines()]
    [first_job, second_job] = [int(job) for event, job, _ in events if event == "submitted"]
    [seen_over] = [float(at) for event, _, at in events if event == "gone"]
    submitted = float(events[-1][2])
    cluster.wait(second_job, timeout=300)
    jobs = (first_job, second_job)
    return resubmitted("resubmit", cluster, work, nodes, rep, looks, jobs, seen_over, submitted, load)


def resubmitted(
    kind: str,
    cluster: MiniCluster,
    work: Path,
    nodes: int,
    rep: int,
    looks: QueueLooks,
    jobs: tuple[int, int],
    seen_over: float,
    submitted: float,
    load: float,
) -> Run:
    """The Run of a kind that resubmits: the first of ``jobs`` crashed, and was seen over at
    ``seen_over``; the sbatch of the second returned at ``submitted``."""
    checked(cluster, work, jobs[0], 1)
    checked(cluster, work, jobs[1], 0)
    crash, exited, ready = driver_times(work)
    times = timeline(work, jobs[1])
    job_start = first(times, protocol.PHASE_JOB_START)
    if job_start is None:
        raise RuntimeError(f"job {jobs[1]} has no job_start in its timeline; see {work}")
    queue = job_start - submitted
    parts = {
        "exit": exited - crash,
        "notice": seen_over - exited,
        "submit": submitted - seen_over,
        "bring_up": ready - job_start,
        "gone": since(crash, looks.gone.get(jobs[0])),
        "driver_start": since(job_start, first(times, protocol.PHASE_DRIVER_START)),
    }
    pending = pending_seconds(cluster, jobs[1])
    return Run(
        kind, nodes, rep, list(jobs), ready - crash - queue, ready - crash, queue, parts, pending, load
    )


RUNNERS = {"in_alloc": in_alloc, "watch": watch, "resubmit": resubmit}


def wait_idle(cluster: MiniCluster, timeout: float = 120) -> None:
    """Every node idle and nothing left in the node namespaces but slurmd, so that no run shares the
    CPU with the last one's exit."""
    deadline = time.monotonic() + timeout
    while set(cluster.run("sinfo", "-h", "-N", "-o", "%T").stdout.split()) != {"idle"} or cluster.leftovers():
        if time.monotonic() > deadline:
            raise RuntimeError("the minicluster did not become idle (nodes, or processes left on them)")
        time.sleep(0.2)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def to_restart(run: Run) -> float | None:
    """Crash -> the next driver run starts (in_alloc: driver_restart) or the next sbatch has returned:
    every stretch but the last, which is the new driver's own start (init, bring-up)."""
    values = [run.parts.get(name) for name in PARTS[run.kind][:-1]]
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def summary(runs: list[Run], kind: str, nodes: int) -> dict[str, object]:
    mine = [r for r in runs if r.kind == kind and r.nodes == nodes]
    parts = {}
    for name in (*PARTS[kind], *EXTRA):
        values = [v for r in mine if (v := r.parts.get(name)) is not None]
        parts[name] = statistics.median(values) if values else None
    pending = [float(r.pending_s) for r in mine if r.pending_s is not None]
    restarts = [v for r in mine if (v := to_restart(r)) is not None]
    return {
        "kind": kind,
        "nodes": nodes,
        "runs": len(mine),
        "recovery": spread([r.recovery for r in mine]),
        "to_restart": spread(restarts) if restarts else None,
        "total": spread([r.total for r in mine]),
        "queue": spread([r.queue for r in mine]),
        "pending_s": spread(pending) if pending else None,
        "load": spread([r.load for r in mine]),
        "parts": parts,
    }


def cell(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-"


def ranged(stats: object) -> str:
    assert isinstance(stats, dict)
    return f"{stats['median']:.2f} ({stats['min']:.2f}-{stats['max']:.2f})"


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "Seconds; median (min-max). recovery: the crash -> the next driver's ray.init returned, minus the",
        "next job's queue wait (its sbatch -> its job_start); to restart: the crash -> the next driver",
        "run starts (in_alloc) or the next sbatch returned; total: recovery with the queue wait;",
        "load: the machine's 1-minute load average as each run started.",
        f"{'N':>2} {'kind':<9}{'runs':>5}  {'recovery':<20}{'to restart':<18}{'total':<20}{'queue':<18}"
        f"{'load':>5}",
    ]
    for row in rows:
        load, restart = row["load"], row["to_restart"]
        assert isinstance(load, dict)
        lines.append(
            f"{row['nodes']:>2} {row['kind']:<9}{row['runs']:>5}  {ranged(row['recovery']):<20}"
            f"{ranged(restart) if restart else '-':<18}{ranged(row['total']):<20}{ranged(row['queue']):<18}"
            f"{load['median']:>5.1f}"
        )
    lines += [
        "",
        "Medians of the stretches that add up to recovery. exit: crash -> the driver's exit handlers done.",
        "in_alloc: clear: -> driver_cleanup; backoff: -> driver_restart; init: -> ray.init returned.",
        "watch, resubmit: notice: -> seen over (watch: its poll; resubmit: squeue empty); submit: -> the",
        "next sbatch returned (watch: its backoff too); (queue left out); bring-up: job_start -> ray.init.",
        "gone: crash -> the job left squeue; pending: the next job's StartTime - SubmitTime (scontrol).",
        f"{'N':>2} {'kind':<9}{'exit':>6}{'clear':>8}{'backoff':>8}{'init':>6}"
        f"{'notice':>8}{'submit':>8}{'bring-up':>9}{'gone':>6}{'pending':>8}",
    ]
    for row in rows:
        p, pending = row["parts"], row["pending_s"]
        assert isinstance(p, dict)
        waited = cell(pending["median"]) if isinstance(pending, dict) else "-"
        lines.append(
            f"{row['nodes']:>2} {row['kind']:<9}{cell(p.get('exit')):>6}{cell(p.get('clear')):>8}"
            f"{cell(p.get('backoff')):>8}{cell(p.get('init')):>6}{cell(p.get('notice')):>8}"
            f"{cell(p.get('submit')):>8}{cell(p.get('bring_up')):>9}{cell(p.get('gone')):>6}{waited:>8}"
        )
    return "\n".join(lines)


COLOURS = {
    "exit": "tab:purple",
    "clear": "tab:orange",
    "backoff": "tab:gray",
    "init": "tab:green",
    "notice": "tab:red",
    "submit": "tab:olive",
    "bring_up": "tab:blue",
}


def plot(rows: list[dict[str, object]], path: Path) -> None:
    """One horizontal bar per kind and N: its median stretches end to end, min-max of recovery as a
    whisker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.8))
    labels, drawn = [], set()
    for y, row in enumerate(reversed(rows)):
        p, recovery, kind = row["parts"], row["recovery"], str(row["kind"])
        assert isinstance(p, dict) and isinstance(recovery, dict)
        left = 0.0
        for name in PARTS[kind]:
            width = p.get(name)
            if width is None:
                continue
            label = name.replace("_", "-")
            axes.barh(y, width, left=left, color=COLOURS[name], label=None if label in drawn else label)
            drawn.add(label)
            left += width
        low, high = recovery["median"] - recovery["min"], recovery["max"] - recovery["median"]
        axes.errorbar(recovery["median"], y, xerr=[[low], [high]], color="black", capsize=3)
        labels.append(f"{kind}, N={row['nodes']}")
    axes.set_yticks(range(len(labels)), labels)
    axes.set(
        xlabel="seconds, driver crash -> the next driver's ray.init returns (queue wait left out)",
        title="Recovery from a driver crash: median stretches; whisker: min-max",
    )
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


@contextlib.contextmanager
def working_dir(keep: Path | None) -> Iterator[Path]:
    """Where the jobs run: ``keep`` (made now, and left), or a temporary directory."""
    if keep is not None:
        keep.mkdir(parents=True)
        yield keep.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="raysub-recovery-") as tmp:
        yield Path(tmp)


def save(path: Path | None, runs: list[Run], started: float, done: bool) -> list[dict[str, object]]:
    """Writes every run so far to ``path`` (after each run, so that a run cut short keeps what it had),
    with their summaries; returns the summaries."""
    order = {kind: k for k, kind in enumerate(KINDS)}
    groups = sorted({(r.nodes, r.kind) for r in runs}, key=lambda g: (g[0], order[g[1]]))
    rows = [summary(runs, kind, nodes) for nodes, kind in groups]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "complete": done,
            "seconds": time.time() - started,
            "watch_options": list(WATCH_OPTIONS),
            "restart_options": list(RESTART_OPTIONS),
            "resubmit_poll_s": 1,
            "summaries": rows,
            "runs": [asdict(r) for r in runs],
        }
        path.write_text(json.dumps(result, indent=2) + "\n")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which of in_alloc,watch,resubmit")
    parser.add_argument("--json", type=Path, help="write every run and the summaries here (after each run)")
    parser.add_argument("--plot", type=Path, help="draw the recovery of each kind and N here (PNG)")
    parser.add_argument("--keep", type=Path, help="run the jobs in this new directory and keep it")
    parser.add_argument(
        "--report", type=Path, help="run nothing: print the table (--plot, --json) of this JSON's runs"
    )
    args = parser.parse_args()
    if args.report:
        saved = json.loads(args.report.read_text())
        runs = [Run(**run) for run in saved["runs"]]
        rows = save(args.json, runs, time.time() - saved["seconds"], saved["complete"])
    else:
        rows = measure(args)
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
    return 0


def measure(args: argparse.Namespace) -> list[dict[str, object]]:
    counts = [int(n) for n in args.nodes.split(",")]
    kinds = tuple(k for k in KINDS if k in args.kinds.split(","))
    # Pinned, as bringup_vs.py: node k on CPU (k-1) mod 2, so that one node's start takes no CPU from
    # another's, as on real nodes. 4 nodes at least, so that a resubmitted job can start on free nodes.
    cluster = MiniCluster(REPO / ".minicluster", nodes=max(4, *counts), pin=True)
    was_up = cluster.script("status", check=False).returncode == 0
    cluster.up()
    runs: list[Run] = []
    started = time.time()
    looks = QueueLooks(cluster)
    looks.start()
    try:
        with page_cache_kept(), working_dir(args.keep) as tmp:
            # Not counted: the first job after the cluster came up finds Ray's files cold.
            wait_idle(cluster)
            in_alloc(cluster, tmp / "warm-up", min(counts), 0, looks)
            for nodes in counts:
                for rep in range(args.repeats):
                    # In turn, in an order that rotates from round to round (as bringup_vs.py).
                    for kind in kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]:
                        wait_idle(cluster)
                        work = tmp / f"{kind}-{nodes}-{rep}"
                        runs.append(RUNNERS[kind](cluster, work, nodes, rep, looks))
                        print(f"# {runs[-1]}", file=sys.stderr, flush=True)
                        save(args.json, runs, started, False)
    finally:
        looks.stop()
        if not was_up:
            cluster.down()
    return save(args.json, runs, started, True)


if __name__ == "__main__":
    sys.exit(main())
