"""The protocol module is the only place that spells a LOG_DIR file name."""

import re

import pytest

from raysub import protocol
from raysub.job.render import TEMPLATES

NAMES = protocol.template_names()


def test_every_name_is_shell_safe() -> None:
    # The templates put these names inside double quotes unquoted: they must need no quoting.
    for name, value in NAMES.items():
        assert re.fullmatch(r"[A-Za-z0-9_./=-]+", value), name


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.j2")))
def test_templates_take_names_from_the_protocol_module(template: str) -> None:
    # Code only: references through files.NAME and comment lines (prose) are set aside.
    code = re.sub(r"files\.[A-Z_]+", "", (TEMPLATES / template).read_text())
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    for name, value in NAMES.items():
        # ".log" and the like are too short to tell from other text, and "ended" is also plain English.
        if len(value) < 5 or re.fullmatch(r"[a-z]+", value):
            continue
        spelled = re.search(rf"(?<!\w){re.escape(value)}(?!\w)", code)
        assert spelled is None, f"{template} spells {value!r}; use files.{name}"


def test_log_dir_names() -> None:
    assert protocol.log_dir_name(4711) == "4711-logs"
    assert protocol.log_dir_name(4711, 2) == "4711-2-logs"


@pytest.mark.parametrize(
    ("workers", "pattern", "first", "last"),
    [
        (1, "nodes/ray-worker-%1t.log", "nodes/ray-worker-0.log", "nodes/ray-worker-0.log"),
        (3, "nodes/ray-worker-%1t.log", "nodes/ray-worker-0.log", "nodes/ray-worker-2.log"),
        (10, "nodes/ray-worker-%1t.log", "nodes/ray-worker-0.log", "nodes/ray-worker-9.log"),
        (11, "nodes/ray-worker-%2t.log", "nodes/ray-worker-00.log", "nodes/ray-worker-10.log"),
        (1023, "nodes/ray-worker-%4t.log", "nodes/ray-worker-0000.log", "nodes/ray-worker-1022.log"),
    ],
)
def test_worker_logs_are_zero_padded_to_the_largest_index(
    workers: int, pattern: str, first: str, last: str
) -> None:
    assert protocol.worker_log_pattern(workers) == pattern
    assert protocol.worker_log_name(0, workers) == first
    assert protocol.worker_log_name(workers - 1, workers) == last
