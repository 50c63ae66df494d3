"""The suite's time by phase, for .ci/run's table (docs/performance.md, "Test suite"): a pytest plugin that
files each test's setup, call and teardown under the phase its path names, and at the end appends one
"<phase>\t<wall seconds>\t<busy seconds>" line per phase, and the counts, to $RAYSUB_PHASE_LOG.

pytest-xdist runs the phases side by side (scripts/test), so a phase has two times: its wall time, from the
first moment one of its tests ran to the last with the gaps where none did left out, and its busy time, the
sum of its tests' own times. Fixtures (a minicluster's bring-up) count in the test that first needs them.
Under xdist only the controller records: every worker's reports reach it."""

import os
from collections import Counter, defaultdict
from pathlib import Path

import pytest

# The first rule whose prefix starts a test's node id names its phase; every other test is a unit test.
PHASES = (
    ("tests/slurm/", "real-Slurm"),
    ("tests/test_bats.py", "bats"),
    ("tests/golden/", "golden"),
    ("tests/unit/test_lint.py", "lint/type"),
    ("tests/unit/test_validate_shellcheck.py", "lint/type"),
    ("tests/unit/test_packaging.py", "wheel build"),
    ("tests/unit/test_hostile_inputs.py", "unit: hostile inputs (bash)"),
)
# The line .ci/run repeats last: the counts of the whole run, as a plain closing line.
COUNTS = "#counts"


def phase_of(nodeid: str) -> str:
    return next((phase for prefix, phase in PHASES if nodeid.startswith(prefix)), "unit")


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds inside at least one of the (start, stop) spans: overlaps count once, gaps not at all."""
    total = 0.0
    reach = float("-inf")
    for start, stop in sorted(spans):
        if stop > reach:
            total += stop - max(start, reach)
            reach = stop
    return total


class PhaseTimes:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.spans: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
        self.busy: defaultdict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}  # by test: passed, or what its first setback was

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        phase = phase_of(report.nodeid)
        self.busy[phase] += report.duration
        self.spans[phase].append((report.start, report.stop))
        if self.outcomes.get(report.nodeid, "passed") == "passed":
            self.outcomes[report.nodeid] = report.outcome

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        lines = [
            f"{phase}\t{covered(self.spans[phase]):.0f}\t{busy:.0f}\n" for phase, busy in self.busy.items()
        ]
        tally = Counter(self.outcomes.values())
        counts = ", ".join(f"{tally[word]} {word}" for word in ("passed", "failed", "skipped"))
        with self.log.open("a") as out:
            out.write("".join(lines) + f"{COUNTS}\t{counts}\n")


def register(config: pytest.Config) -> None:
    """Time the phases when .ci/run asked for it (RAYSUB_PHASE_LOG names the file), in the controller only."""
    log = os.environ.get("RAYSUB_PHASE_LOG")
    if log and not hasattr(config, "workerinput"):
        config.pluginmanager.register(PhaseTimes(Path(log)), "raysub-phase-times")
