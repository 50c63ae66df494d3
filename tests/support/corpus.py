"""The corpus of real log blocks (tests/fixtures/corpus/README.md): each block with what a person reading it
would say, and how raysub's answer to a block is judged against that.

An answer is one of three: right (what the reader says), unknown (raysub says nothing of a value the reader
knows: allowed, but counted), or wrong (raysub says something the reader does not: another value, or any
value where the reader says unknown). Wrong answers must be none.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).parents[1] / "fixtures" / "corpus"
UNKNOWN = "unknown"
RIGHT, NO_ANSWER, WRONG = "right", "no answer", "wrong"
# Seconds per step: a reader reads a tqdm rate or a timer to a few digits, and tqdm's rate is smoothed.
SECONDS_TOLERANCE = 0.05
_NUMBER = re.compile(r"^(?P<number>\d+(?:\.\d+)?)")
_THROUGHPUT = re.compile(r"^(?P<number>[\d.,]+) +(?P<unit>\S+)")


@dataclass(frozen=True)
class Block:
    """One file of the corpus: its header (key → value, the value's words before any parenthesis) and
    the log lines after it."""

    path: Path
    header: dict[str, str]
    text: str

    @property
    def name(self) -> str:
        return self.path.stem

    def value(self, key: str) -> str:
        return self.header[key].split(" (")[0].strip()

    def integer(self, key: str) -> int | None:
        value = self.value(key)
        return None if value == UNKNOWN else int(value)

    def number(self, key: str) -> float | None:
        value = self.value(key)
        if value == UNKNOWN:
            return None
        match = _NUMBER.match(value)
        assert match, f"{self.name}: {key} is neither a number nor unknown: {value!r}"
        return float(match["number"])

    def throughput(self) -> tuple[float, str] | None:
        value = self.value("throughput")
        if value == UNKNOWN:
            return None
        match = _THROUGHPUT.match(value)
        assert match, f"{self.name}: throughput is not '<number> <unit>': {value!r}"
        return float(match["number"].replace(",", "")), match["unit"]


def read_block(path: Path) -> Block:
    raw = path.read_bytes().decode("utf-8", errors="surrogateescape")
    head, _, text = raw.partition("\n\n")
    header: dict[str, str] = {}
    for line in head.split("\n"):
        key, _, value = line.removeprefix("# ").partition(": ")
        assert line.startswith("# ") and value, f"{path.name}: not a header line: {line!r}"
        header[key] = value
    return Block(path, header, text)


def blocks(kind: str) -> list[Block]:
    """Every block of ``kind`` ("progress" or "nccl"), by name."""
    return [read_block(path) for path in sorted((CORPUS / kind).glob("*.log"))]


def judge(expected: object, got: object, same: bool | None = None) -> str:
    """RIGHT, NO_ANSWER or WRONG for one value; ``same`` overrides equality (numbers near enough)."""
    if got is None:
        return NO_ANSWER if expected is not None else RIGHT
    if expected is None:
        return WRONG
    return RIGHT if (got == expected if same is None else same) else WRONG


def near(expected: float | None, got: float | None, tolerance: float) -> bool | None:
    if expected is None or got is None:
        return None
    return math.isclose(expected, got, rel_tol=tolerance)
