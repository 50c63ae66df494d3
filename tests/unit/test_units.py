"""The head's unit counter (raysub/job/programs/units.py): what it says of the Ray it runs with."""

import sys
import types
from functools import partial
from pathlib import Path

import pytest

from raysub import protocol
from raysub.job.lib import gcs
from raysub.job.lib.counter import Counter, collapse_known, loaded_ray_version
from raysub.job.programs.units import parse


@pytest.mark.parametrize(
    ("version", "known"),
    [
        ("2.56.0", True),
        ("2.56.1", True),
        ("2.55.1", False),
        ("2.57.0", False),
        ("3.0.0", False),
        ("dev", False),
    ],
)
def test_only_ray_versions_reported_to_collapse_at_scale_are_named(version: str, known: bool) -> None:
    said = collapse_known(version)
    assert (said is not None) == known
    if said:
        assert "ray-project/ray#64845" in said


def test_the_head_asks_for_the_check_only_at_large_scale() -> None:
    base = ["--log-dir=/l", "--address-file=/a", "--expected=8", "--kind=gpu", "--auth=token", "--node=n"]
    timing = ["--ready-look=0.02", "--brisk=1", "--slow=5"]
    assert parse([*base, *timing, "--large-scale"]).large_scale
    assert not parse([*base, *timing]).large_scale


def test_a_ray_module_that_does_not_say_its_version_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert loaded_ray_version() == ""
    assert collapse_known(loaded_ray_version()) is None
    stated = types.ModuleType("ray")
    stated.__version__ = "2.56.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray", stated)
    assert loaded_ray_version() == "2.56.0"


def test_the_counter_puts_each_node_joining_and_leaving_ray_on_the_timeline(tmp_path: Path) -> None:
    counter = Counter(tmp_path, "node1", count_gpus=False)
    node = partial(gcs.Node, address="10.0.0.9", metrics_port=0, gpus=0)
    counter.update([node("node1"), node("node2")])
    counter.update([node("node1"), node("node2"), node("node3")])
    counter.update([node("node1"), node("node3")])
    events = [(event.phase, event.detail) for event in protocol.read_timeline(tmp_path)]
    assert events == [
        (protocol.PHASE_WORKER_JOINED, "node1"),
        (protocol.PHASE_WORKER_JOINED, "node2"),
        (protocol.PHASE_WORKER_JOINED, "node3"),
        (protocol.PHASE_WORKER_LEFT, "node2"),
    ]
    assert protocol.read_joined_nodes(tmp_path) == ["node1", "node3"]
