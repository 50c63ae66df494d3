"""What raysub's own processes cost beside a long run (root, on the minicluster): CPU seconds per minute and
resident memory per node of raysub's processes (the batch script, the node scripts and their waits, the
head's unit counter and monitor sidecar) apart from Ray's, over a window while an idle driver runs.
Target: below 1% of one core (0.6 CPU s/min) and 100 MiB per node at the default monitor interval.

    .venv/bin/python benchmarks/overhead.py [--nodes 4] [--window 30]
        [--json benchmarks/results/overhead.json]

A process belongs to the job when its environment carries the job's mark (_RAYSUB_JOB_MARK, which every
node script sets for all it starts) or it is the job's batch script; it is srun's when it is one of the
batch script's srun clients (Slurm's, which any job with steps has: the bare job of bringup_vs.py has the
same two), raysub's when it runs a raysub script or node program (or a `sleep` of one), Ray's otherwise.
CPU is utime + stime (+ the children raysub's shells waited for) at the window's end minus at its start;
memory is VmRSS at the end.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub import protocol  # noqa: E402
from tests.support.minicluster import MiniCluster  # noqa: E402
from tests.support.raysub_jobs import submit, wait_for  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
TARGET_CORE_PCT, TARGET_MIB = 1.0, 100.0
# What a raysub process runs: its scripts in LOG_DIR, its node programs, the batch script Slurm runs.
RAYSUB_MARKS = (".sh", "raysub.job.programs.", "slurm_script")


@dataclass
class Usage:
    cpu_s: float = 0.0
    rss_mib: float = 0.0
    processes: int = 0


@dataclass
class Sample:
    """CPU seconds by process, and who each process is: (node, raysub's or Ray's)."""

    cpu: dict[int, float] = field(default_factory=dict)
    rss: dict[int, float] = field(default_factory=dict)
    owner: dict[int, tuple[str, str]] = field(default_factory=dict)


def read(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def owner(pid: int, job_id: str, canary: str) -> tuple[str, str] | None:
    """(node, "raysub" or "ray") for a process of the job, else None."""
    environ = dict(e.split(b"=", 1) for e in read(pid, "environ").split(b"\0") if b"=" in e)
    mark = environ.get(protocol.ENV_MARK.encode(), b"").decode()
    batch = environ.get(b"SLURM_JOB_ID", b"").decode() == job_id and not mark
    if not mark.startswith(canary) and not batch:
        return None
    node = environ.get(b"SLURMD_NODENAME", b"?").decode()
    command = read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")
    if command.startswith("srun "):
        return node, "srun"
    ours = any(m in command for m in RAYSUB_MARKS) or command.startswith("sleep ")
    return node, "raysub" if ours else "ray"


def sample(job_id: str, canary: str) -> Sample:
    now = Sample()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            who = owner(pid, job_id, canary)
            if who is None:
                continue
            fields = read(pid, "stat").rsplit(b")", 1)[1].split()
            # utime, stime, cutime, cstime: the waited-for children of raysub's shells count as theirs.
            now.cpu[pid] = sum(int(f) for f in fields[11:15]) / TICKS
            status = read(pid, "status").decode()
            rss = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), "0")
            now.rss[pid] = int(rss) / 1024
            now.owner[pid] = who
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    return now


def usage(before: Sample, after: Sample) -> dict[tuple[str, str], Usage]:
    """CPU spent in the window by processes alive at its end (those started in it from zero)."""
    total: dict[tuple[str, str], Usage] = {}
    for pid, who in after.owner.items():
        use = total.setdefault(who, Usage())
        use.cpu_s += after.cpu[pid] - before.cpu.get(pid, 0.0)
        use.rss_mib += after.rss[pid]
        use.processes += 1
    return total


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--window", type=float, default=30.0, help="seconds to measure over")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("needs root (the minicluster, and other users' /proc/PID/environ)")
    cluster = MiniCluster(REPO / ".minicluster", nodes=max(4, args.nodes))
    was_up = cluster.script("status", check=False).returncode == 0
    cluster.up()
    try:
        with tempfile.TemporaryDirectory(prefix="raysub-overhead-") as tmp:
            idle = f"import time; time.sleep({args.window + 120})"
            render = ["--nodes", str(args.nodes), "--gpus-per-node", "0", "--", "python", "-c", idle]
            job_id, logs = submit(cluster, Path(tmp), render)
            wait_for(logs.file(protocol.DRIVER_STARTED), timeout=180)
            time.sleep(10)  # past bring-up: the monitor's first snapshots, the counter at its slow pace
            canary = logs.file(protocol.CANARY).read_text().strip()
            before = sample(str(job_id), canary)
            time.sleep(args.window)
            after = sample(str(job_id), canary)
            cluster.run("scancel", str(job_id))
            cluster.wait(job_id)
    finally:
        if not was_up:
            cluster.down()
    rows = report(usage(before, after), args.window)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"window_s": args.window, "nodes": rows}, indent=2) + "\n")
    return 0


def report(used: dict[tuple[str, str], Usage], window: float) -> list[dict[str, object]]:
    print(f"Over {window:.0f} s of an idle driver; raysub's processes apart from srun's and Ray's, per node.")
    print(f"Target for raysub: < {TARGET_CORE_PCT:g}% of one core and < {TARGET_MIB:g} MiB per node.")
    print(f"{'node':<8}{'who':<8}{'procs':>6}{'CPU s/min':>11}{'% core':>8}{'RSS MiB':>9}")
    rows = []
    for (node, who), use in sorted(used.items()):
        per_minute = use.cpu_s * 60 / window
        percent = 100 * use.cpu_s / window
        print(f"{node:<8}{who:<8}{use.processes:>6}{per_minute:>11.2f}{percent:>8.2f}{use.rss_mib:>9.1f}")
        rows.append({"node": node, "who": who, "processes": use.processes, "cpu_s_per_min": per_minute,
                     "core_pct": percent, "rss_mib": use.rss_mib})  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
