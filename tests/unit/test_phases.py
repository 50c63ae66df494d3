"""The suite's time by phase (tests/support/phases.py), which .ci/run prints as its closing table."""

from pathlib import Path
from typing import Literal

import pytest

from tests.support.phases import COUNTS, PhaseTimes, covered, phase_of

When = Literal["setup", "call", "teardown"]
Outcome = Literal["passed", "failed", "skipped"]


def report(nodeid: str, when: When, outcome: Outcome, start: float, stop: float) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid, ("x", 1, "x"), {}, outcome, None, when, duration=stop - start, start=start, stop=stop
    )


@pytest.mark.parametrize(
    ("nodeid", "phase"),
    [
        ("tests/slurm/test_security.py::test_x", "real-Slurm"),
        ("tests/test_bats.py::test_bats[node_scripts.bats]", "bats"),
        ("tests/golden/test_golden.py::test_x[base]", "golden"),
        ("tests/unit/test_lint.py::test_mypy", "lint/type"),
        ("tests/unit/test_packaging.py::test_wheel_carries_the_license", "wheel build"),
        ("tests/unit/test_hostile_inputs.py::test_x", "unit: hostile inputs (bash)"),
        ("tests/unit/test_spec.py::test_x", "unit"),
    ],
)
def test_each_test_falls_in_the_phase_its_path_names(nodeid: str, phase: str) -> None:
    assert phase_of(nodeid) == phase


@pytest.mark.parametrize(
    ("spans", "seconds"),
    [
        ([], 0),
        ([(0, 10)], 10),
        ([(0, 10), (20, 25)], 15),  # a gap where nothing ran is not the phase's time
        ([(0, 10), (5, 12)], 12),  # overlapping tests count once
        ([(3, 4), (0, 10), (9, 11)], 11),  # in any order, one inside another
    ],
)
def test_a_phases_wall_time_counts_overlaps_once_and_gaps_not_at_all(
    spans: list[tuple[float, float]], seconds: float
) -> None:
    assert covered(spans) == seconds


def test_phases_keep_wall_and_busy_time_and_each_test_counts_once(tmp_path: Path) -> None:
    log = tmp_path / "phases.tsv"
    log.write_text("apt update\t3\n")  # .ci/run's own line stays first
    times = PhaseTimes(log)
    # Two workers: slurm tests one after another on one, unit tests side by side with them on the other.
    tests: dict[str, list[tuple[When, Outcome, float, float]]] = {
        "tests/slurm/test_a.py::t": [
            ("setup", "passed", 100, 110),
            ("call", "passed", 110, 115),
            ("teardown", "passed", 115, 116),
        ],
        "tests/slurm/test_b.py::t": [("setup", "skipped", 116, 116.5)],
        "tests/unit/test_c.py::t": [
            ("setup", "passed", 100, 100),
            ("call", "failed", 100, 102.2),
            ("teardown", "failed", 102.2, 102.2),
        ],
        "tests/unit/test_d.py::t": [("call", "passed", 101, 104)],
    }
    for nodeid, parts in tests.items():
        for when, outcome, start, stop in parts:
            times.pytest_runtest_logreport(report(nodeid, when, outcome, start, stop))
    times.pytest_sessionfinish()
    assert log.read_text() == (
        f"apt update\t3\nreal-Slurm\t16\t16\nunit\t4\t5\n{COUNTS}\t2 passed, 1 failed, 1 skipped\n"
    )
