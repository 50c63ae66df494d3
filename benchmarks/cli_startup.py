"""How long raysub's commands take to start: median wall time over repeated runs of `raysub --help`,
`raysub render --nodes 64 ...` and `raysub status` on a finished job, and whether any of them imports
ray (none may: `raysub --help` on a login node must not pay Ray's import). Target: < 0.2 s each.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 20] [--json benchmarks/results/cli_startup.json]

Slurm is kept out of reach (PATH holds nothing), so `raysub status` measures raysub, not slurmctld.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub import protocol  # noqa: E402
from raysub.protocol.logdir import LogDir, NodeEntry  # noqa: E402

TARGET_S = 0.2


def finished_job(base: Path) -> Path:
    """A LOG_DIR as a 4-node job leaves it, written with the protocol's writers."""
    logs = LogDir.of(base, 4711)
    logs.path.mkdir(parents=True)
    nodes = [NodeEntry(protocol.ROLE_HEAD, 0, "node1")]
    nodes += [NodeEntry(protocol.ROLE_WORKER, k, f"node{k + 2}") for k in range(3)]
    logs.write_node_map(nodes)
    logs.started_ray_head.write_text("10.0.0.1:6379\n")
    protocol.write_joined_nodes(logs.path, (n.node for n in nodes))
    logs.write_driver_exit_code(0)
    logs.end("driver exited with status 0", "node1")
    return logs.path


def timed(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, bool]:
    """Median seconds of ``argv``, and whether one run imported ray (python -X importtime says)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    traced = subprocess.run(
        [*argv[:1], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines() if "|" in line}
    return statistics.median(times), "ray" in imported


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nowhere = Path(tmp, "bin")
        nowhere.mkdir()
        env = {"PATH": str(nowhere), "HOME": tmp, "XDG_STATE_HOME": tmp}
        job = finished_job(Path(tmp))
        raysub = [sys.executable, "-m", "raysub"]
        commands = {
            "raysub --help": [*raysub, "--help"],
            "raysub render --nodes 64": [*raysub, "render", "--nodes", "64", "--", "python", "train.py"],
            "raysub status": [*raysub, "status", str(job)],
        }
        rows = [(name, *timed(argv, env, args.repeats)) for name, argv in commands.items()]
    print(f"{'command':<28}{'median s':>10}  imports ray  (target < {TARGET_S} s, {args.repeats} runs)")
    for name, seconds, ray in rows:
        print(f"{name:<28}{seconds:>10.3f}  {'YES' if ray else 'no'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        results = [{"command": n, "median_s": s, "imports_ray": r} for n, s, r in rows]
        args.json.write_text(json.dumps({"repeats": args.repeats, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
