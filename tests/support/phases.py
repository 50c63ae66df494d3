"""The suite's time by phase, for .ci/run's table (docs/performance.md, "Test suite"): a pytest plugin that
adds up each test's setup, call and teardown under the phase its path names, and at the end appends one
"<phase>\t<seconds>" line per phase, and the counts, to $RAYSUB_PHASE_LOG. Tests run one after another,
so the sums are the phases' wall time, fixtures (a minicluster's bring-up) included."""

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


class PhaseTimes:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}  # by test: passed, or what its first setback was

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[phase_of(report.nodeid)] += report.duration
        if self.outcomes.get(report.nodeid, "passed") == "passed":
            self.outcomes[report.nodeid] = report.outcome

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        lines = [f"{phase}\t{seconds:.0f}\n" for phase, seconds in self.seconds.items()]
        tally = Counter(self.outcomes.values())
        counts = ", ".join(f"{tally[word]} {word}" for word in ("passed", "failed", "skipped"))
        with self.log.open("a") as out:
            out.write("".join(lines) + f"{COUNTS}\t{counts}\n")


def register(config: pytest.Config) -> None:
    """Time the phases when .ci/run asked for it (RAYSUB_PHASE_LOG names the file)."""
    log = os.environ.get("RAYSUB_PHASE_LOG")
    if log:
        config.pluginmanager.register(PhaseTimes(Path(log)), "raysub-phase-times")
