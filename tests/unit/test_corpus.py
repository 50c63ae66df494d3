"""raysub.health's parsers on the corpus of real log blocks (tests/fixtures/corpus/): no answer may be
wrong, and the share of blocks answered is printed and must be the one docs/health.md states."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from raysub.health.nccl import nccl_transport, transports_by_node
from raysub.health.progress import progress
from raysub.health.text import clean
from tests.support.corpus import (
    RIGHT,
    SECONDS_TOLERANCE,
    UNKNOWN,
    WRONG,
    Block,
    blocks,
    judge,
    near,
)
from tests.unit.test_docs import check_generated

DOCS = Path(__file__).parents[2] / "docs" / "health.md"
PROGRESS = blocks("progress")
NCCL = blocks("nccl")
# Values of a block's per_node field: "host: network, host: network".
_PER_NODE = re.compile(r"(?:^|, )(?P<node>[\w.-]+): (?P<network>IB|RoCE|EFA|Socket|unknown)\b")


def progress_verdicts(block: Block) -> dict[str, str]:
    """What raysub answers for ``block``, judged value by value."""
    found = progress(block.text)
    step = judge(block.integer("step"), found and found.step)
    if found is None or step != RIGHT:
        return {"step": step}
    expected_seconds = block.number("seconds_per_step")
    expected_throughput = block.throughput()
    got_throughput = (found.throughput.value, found.throughput.unit) if found.throughput else None
    same_throughput = None
    if expected_throughput and got_throughput:
        same_throughput = expected_throughput[1] == got_throughput[1] and bool(
            near(expected_throughput[0], got_throughput[0], 0.001)
        )
    return {
        "step": step,
        "total": judge(block.integer("total"), found.total),
        "seconds_per_step": judge(
            expected_seconds,
            found.seconds_per_step,
            near(expected_seconds, found.seconds_per_step, SECONDS_TOLERANCE),
        ),
        "throughput": judge(expected_throughput, got_throughput, same_throughput),
    }


def nccl_verdicts(block: Block) -> dict[str, str]:
    expected = block.value("network")
    verdicts = {"network": judge(None if expected == UNKNOWN else expected, nccl_transport(block.text))}
    for node, network in _PER_NODE.findall(block.value("per_node")):
        node_lines = "\n".join(
            line for line in block.text.split("\n") if clean(0, line).message.startswith(f"{node}:")
        )
        got = transports_by_node({node: node_lines})[node]
        verdicts[f"node {node}"] = judge(None if network == UNKNOWN else network, got)
    return verdicts


@pytest.mark.parametrize("block", PROGRESS, ids=lambda block: block.name)
def test_progress_is_never_wrong(block: Block) -> None:
    verdicts = progress_verdicts(block)
    assert WRONG not in verdicts.values(), (verdicts, progress(block.text), block.header)


@pytest.mark.parametrize("block", NCCL, ids=lambda block: block.name)
def test_nccl_transport_is_never_wrong(block: Block) -> None:
    verdicts = nccl_verdicts(block)
    assert WRONG not in verdicts.values(), (verdicts, nccl_transport(block.text), block.header)


def _share(counts: Counter[str], known: int) -> str:
    return f"{counts[RIGHT]} of {known}"


def corpus_summary() -> list[str]:
    """The lines docs/health.md states: for each value, how many blocks that show it are answered."""
    lines = []
    by_value: dict[str, Counter[str]] = {}
    for block in PROGRESS:
        verdicts = progress_verdicts(block)
        for key, verdict in verdicts.items():
            if key == "step" or block.value(key) != UNKNOWN:
                by_value.setdefault(key, Counter())[verdict] += 1
    training = [block for block in PROGRESS if block.value("step") != UNKNOWN]
    for key in ("step", "total", "seconds_per_step", "throughput"):
        counts = by_value.get(key, Counter())
        if key == "step":
            known = len(training)
            counts = Counter(progress_verdicts(block)["step"] for block in training)
        else:
            known = sum(1 for block in training if block.value(key) != UNKNOWN)
        lines.append(f"- {key.replace('_', ' ')}: {_share(counts, known)} blocks that show one")
    networks = [block for block in NCCL if block.value("network") != UNKNOWN]
    counts = Counter(nccl_verdicts(block)["network"] for block in networks)
    lines.append(f"- NCCL network: {_share(counts, len(networks))} blocks that show one")
    return lines


def test_the_share_answered_is_printed_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    summary = corpus_summary()
    header = f"corpus: {len(PROGRESS)} training-log blocks, {len(NCCL)} NCCL blocks; answered right:"
    with capsys.disabled():
        print("\n" + "\n".join([header, *summary]))
    stated = f"{len(PROGRESS)} training-log blocks and {len(NCCL)} NCCL blocks, answered right:\n\n"
    check_generated(
        DOCS, "the share answered (tests/unit/test_corpus.py)", stated + "\n".join(summary) + "\n"
    )


def test_the_corpus_is_as_big_and_as_wide_as_issue_24_asks() -> None:
    stacks = {block.value("stack").split(" ")[0].lower() for block in PROGRESS}
    assert len(PROGRESS) >= 60
    assert len(stacks) >= 20, sorted(stacks)
    assert len(NCCL) >= 20
    assert all(block.header.get("source", "").startswith("https://") for block in PROGRESS + NCCL)
