"""The suite's time by phase (tests/support/phases.py), which .ci/run prints as its closing table."""

from pathlib import Path
from typing import Literal

import pytest

from tests.support.phases import COUNTS, PhaseTimes, phase_of

When = Literal["setup", "call", "teardown"]
Outcome = Literal["passed", "failed", "skipped"]


def report(nodeid: str, when: When, outcome: Outcome, duration: float) -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("x", 1, "x"), {}, outcome, None, when, duration=duration)


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


def test_phases_add_up_every_part_of_a_test_and_each_test_counts_once(tmp_path: Path) -> None:
    log = tmp_path / "phases.tsv"
    log.write_text("apt update\t3\n")  # .ci/run's own line stays first
    times = PhaseTimes(log)
    tests: dict[str, list[tuple[When, Outcome, float]]] = {
        "tests/slurm/test_a.py::t": [
            ("setup", "passed", 10.0),
            ("call", "passed", 5.0),
            ("teardown", "passed", 1),
        ],
        "tests/slurm/test_b.py::t": [("setup", "skipped", 0.5)],
        "tests/unit/test_c.py::t": [
            ("setup", "passed", 0),
            ("call", "failed", 2.2),
            ("teardown", "failed", 0),
        ],
    }
    for nodeid, parts in tests.items():
        for when, outcome, seconds in parts:
            times.pytest_runtest_logreport(report(nodeid, when, outcome, seconds))
    times.pytest_sessionfinish()
    assert (
        log.read_text()
        == f"apt update\t3\nreal-Slurm\t16\nunit\t2\n{COUNTS}\t1 passed, 1 failed, 1 skipped\n"
    )
