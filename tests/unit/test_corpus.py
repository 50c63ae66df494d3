"""raysub.health's parsers on the corpus of real log blocks (tests/fixtures/corpus/): no answer may be
wrong, and the share of blocks answered is printed and must be the one docs/health.md states."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from raysub.health import fatal
from raysub.health.nccl import nccl_transport, transports_by_node
from raysub.health.progress import progress
from raysub.health.text import clean
from tests.support.corpus import (
    NO_ANSWER,
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
FATAL = blocks("fatal")
# A fatal block's kind (its header) and the kinds of raysub.health.fatal that name it right.
FATAL_KINDS = {
    "traceback": {fatal.TRACEBACK, fatal.NCCL_ERROR, fatal.NCCL_TIMEOUT, fatal.CUDA_OOM},
    "oom": {fatal.CUDA_OOM},
    "node-died": {fatal.NODE_DIED},
    "actor-died": {fatal.ACTOR_DIED},
    "signal": {fatal.KILLED},
    "segfault": {fatal.CRASH},
    "healthy": set(),
}
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
    per_node = dict(_PER_NODE.findall(block.value("per_node")))
    texts = {
        node: "\n".join(
            line for line in block.text.split("\n") if clean(0, line).message.startswith(f"{node}:")
        )
        for node in per_node
    }
    for node, got in transports_by_node(texts).items():  # all the job's nodes at once, as raysub health
        verdicts[f"node {node}"] = judge(None if per_node[node] == UNKNOWN else per_node[node], got)
    return verdicts


def fatal_verdict(block: Block) -> str:
    """RIGHT when the block's fatal line is found as a kind that names it, NO_ANSWER when it is missed;
    WRONG for a false alarm (any line found in a healthy block), a node death where Ray says none, or the
    fatal line named as another kind."""
    expected = block.header["fatal"].rstrip()
    right_kinds = FATAL_KINDS[block.value("kind")]
    found = fatal.fatal_lines(block.text)
    if not right_kinds:
        return WRONG if found else RIGHT
    if any(line.kind == fatal.NODE_DIED for line in found) and fatal.NODE_DIED not in right_kinds:
        return WRONG
    named = [line.kind for line in found if line.line.rstrip() == expected]
    if not named:
        return NO_ANSWER
    return RIGHT if named[0] in right_kinds else WRONG


@pytest.mark.parametrize("block", PROGRESS, ids=lambda block: block.name)
def test_progress_is_never_wrong(block: Block) -> None:
    verdicts = progress_verdicts(block)
    assert WRONG not in verdicts.values(), (verdicts, progress(block.text), block.header)


@pytest.mark.parametrize("block", NCCL, ids=lambda block: block.name)
def test_nccl_transport_is_never_wrong(block: Block) -> None:
    verdicts = nccl_verdicts(block)
    assert WRONG not in verdicts.values(), (verdicts, nccl_transport(block.text), block.header)


@pytest.mark.parametrize("block", FATAL, ids=lambda block: block.name)
def test_fatal_lines_are_never_wrong_and_never_a_false_alarm(block: Block) -> None:
    assert fatal_verdict(block) != WRONG, (
        [(f.kind, f.line) for f in fatal.fatal_lines(block.text)],
        block.header,
    )


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
    failures = [block for block in FATAL if block.value("kind") != "healthy"]
    counts = Counter(fatal_verdict(block) for block in failures)
    lines.append(f"- the line that ends a run: {_share(counts, len(failures))} failed runs")
    healthy = len(FATAL) - len(failures)
    alarms = sum(fatal_verdict(block) == WRONG for block in FATAL if block.value("kind") == "healthy")
    lines.append(f"- false alarms: {alarms} of {healthy} healthy logs that look alarming")
    return lines


def test_the_share_answered_is_printed_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    summary = corpus_summary()
    header = (
        f"corpus: {len(PROGRESS)} training-log blocks, {len(NCCL)} NCCL blocks, {len(FATAL)} failure and"
        " healthy blocks; answered right:"
    )
    with capsys.disabled():
        print("\n" + "\n".join([header, *summary]))
    stated = (
        f"{len(PROGRESS)} training-log blocks, {len(NCCL)} NCCL blocks and {len(FATAL)} blocks of failed runs"
        " and of healthy runs that look alarming, answered right:\n\n"
    )
    check_generated(
        DOCS, "the share answered (tests/unit/test_corpus.py)", stated + "\n".join(summary) + "\n"
    )


def test_the_corpus_is_as_big_and_as_wide_as_issues_24_and_43_ask() -> None:
    stacks = {block.value("stack").split(" ")[0].lower() for block in PROGRESS}
    assert len(PROGRESS) >= 60
    assert len(stacks) >= 20, sorted(stacks)
    assert len(NCCL) >= 20
    assert all(block.header.get("source", "").startswith("https://") for block in PROGRESS + NCCL + FATAL)
    # Issue 43: 40 more public blocks than its 62 training and 32 NCCL blocks, across the categories it
    # names: epoch-local, evaluation and interval-local counters, plugin fallbacks and single hosts, fatal
    # shapes and healthy logs that look alarming.
    assert len(PROGRESS) + len(NCCL) + len(FATAL) >= 62 + 32 + 40
    assert {block.value("kind") for block in FATAL} == set(FATAL_KINDS)
    assert any(block.value("network") == "none" for block in NCCL)
