"""How raysub reads a long driver log: the seconds and the peak memory, beyond the log's own text, of
raysub.health.progress.step_points (every step: what raysub report draws) and progress (the latest
step: what raysub health and watch read), on logs of STEPS verl step lines with BETWEEN other lines
before each. Both kinds of line are real, from the samples of tests/fixtures/corpus/progress/ (each
with its source): the step line is VERL's step:4 line (1.6 KB of metrics), its step number counted up;
the others are the samples' lines that raysub reads no step from. Target: with other lines between the
steps, under the text's size in memory beyond it (a step-dense log keeps each step line: no target).

    .venv/bin/python benchmarks/log_reading.py [--steps 5000] [--between 0 10 50]
        [--json benchmarks/results/log_reading.json]

Memory is traced with tracemalloc in a second run of each call (it slows Python down several times), so
the seconds come from a run without it.
"""

import argparse
import json
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from raysub.health.progress import progress, step_points  # noqa: E402

CORPUS = REPO / "tests" / "fixtures" / "corpus" / "progress"
VERL = CORPUS / "verl-step-key-value-lines-then-validation-samples.log"
MIB = 2**20


def other_lines() -> list[str]:
    """Every line of the progress corpus's samples (not their '# ' headers) that raysub reads no step
    from, alone or after a line that makes a count the run's step (Keras' "Epoch 1/3" before its bar)."""
    found = []
    for sample in sorted(CORPUS.glob("*.log")):
        for line in sample.read_text(errors="replace").splitlines():
            if line and not line.startswith("# ") and not step_points(f"Epoch 1/3\n{line}"):
                found.append(line)
    return found


def build(steps: int, between: int, others: list[str]) -> str:
    """A log of ``steps`` verl step lines, each after ``between`` of ``others`` (in turn)."""
    [step_line] = [line for line in VERL.read_text(errors="replace").splitlines() if " step:4 - " in line]
    lines: list[str] = []
    for step in range(1, steps + 1):
        lines += [others[(step * between + k) % len(others)] for k in range(between)]
        lines.append(step_line.replace(" step:4 - ", f" step:{step} - "))
    return "\n".join(lines)


def measure(read: Callable[[str], object], text: str) -> tuple[float, float]:
    """Seconds of ``read(text)`` and its peak traced memory in MiB (from a second, traced run)."""
    start = time.perf_counter()
    read(text)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    try:
        read(text)
        peak = tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()
    return seconds, peak


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--between", type=int, nargs="+", default=[0, 10, 50])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    others = other_lines()
    rows = []
    for between in args.between:
        text = build(args.steps, between, others)
        size = len(text.encode()) / MIB
        points_s, points_mib = measure(step_points, text)
        latest_s, latest_mib = measure(progress, text)
        read = len(step_points(text))
        rows.append(
            {
                "steps": args.steps, "between": between, "text_mib": size, "steps_read": read,
                "step_points_s": points_s, "step_points_peak_mib": points_mib,
                "progress_s": latest_s, "progress_peak_mib": latest_mib,
                "within_target": None if between == 0 else max(points_mib, latest_mib) < size,
            }
        )  # fmt: skip
    print(f"{'between':>7} {'text MiB':>9} {'read':>6} {'points s':>9} {'MiB':>6} {'latest s':>9} {'MiB':>6}")
    for row in rows:
        print(
            f"{row['between']:>7} {row['text_mib']:>9.2f} {row['steps_read']:>6} {row['step_points_s']:>9.2f}"
            f" {row['step_points_peak_mib']:>6.1f} {row['progress_s']:>9.2f} {row['progress_peak_mib']:>6.1f}"
        )
    print(f"({args.steps} step lines; MiB: peak beyond the text; target: under the text's size when other")
    print(" lines lie between the steps)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"results": rows}, indent=2) + "\n")
    return 0 if all(row["within_target"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
