"""How scripts/test shares the suite among xdist's workers (tests/support/workers.py)."""

import pytest

from tests.support.workers import OneMinicluster


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/slurm/test_security.py::test_a", "minicluster"),
        ("tests/slurm/test_failures.py::test_b[x]", "minicluster"),
        ("tests/unit/test_packaging.py::test_wheel_installs_into_a_fresh_venv", "minicluster"),
        ("tests/unit/test_spec.py::test_c", "tests/unit/test_spec.py::test_c"),
        ("tests/unit/test_hostile_inputs.py::test_d[1]", "tests/unit/test_hostile_inputs.py::test_d[1]"),
        ("tests/test_bats.py::test_bats[sandbox.bats]", "tests/test_bats.py::test_bats[sandbox.bats]"),
    ],
)
def test_the_minicluster_and_the_wheel_share_one_worker_every_other_test_goes_alone(
    nodeid: str, scope: str
) -> None:
    assert OneMinicluster._split_scope(None, nodeid) == scope  # type: ignore[arg-type]
