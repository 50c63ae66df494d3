"""The latest training step a log shows, from the lines trainers print (:data:`DEFAULT_PATTERNS`).

Lines are read as :mod:`raysub.health.text` cleans them (Ray and rank prefixes, ANSI escapes and tqdm's
carriage-return debris undone). A line counts only when one of the patterns matches it and nothing on
the line up to the step number speaks of evaluation, validation, tests, generation, rollouts,
sampling, inference, checkpoints, saving or loading: evaluation bars, ``Saving checkpoint to
.../global_step_100`` and the like are not training progress, and no pattern reads timers (``step
time: 1.2s``, ``elapsed``). The first pattern of the table that matches a line is the one that reads
it; a user's ``step_regex`` replaces the table and is trusted without that guard.

tqdm bars count only when their unit is ``it`` (not bytes) and their description names training (a
step, an epoch, an episode, a batch, "Train", "Progress"), except OpenRLHF's ``Train epoch`` bars,
which count epochs or the updates inside one step. HF Trainer prints its training and its evaluation
bars without a description: the first such bar's total is taken as the training bar's, and a later
bar without a description and with another total as an evaluation bar.

HF Trainer's ``{'loss': ..., 'epoch': ...}`` lines carry no step (its step is in the bar); a JSON or
Python-dict line counts when it has a ``step``, ``global_step`` or ``training_iteration`` key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from raysub.health.text import Line, lines

# Words that make a match no training progress when they stand on its line before the step number.
_NOT_TRAINING = re.compile(
    r"eval|valid|\btest|sanity|predict|generat|rollout|sampl|infer|checkpoint|\bsav(?:e|ing)\b|load",
    re.IGNORECASE,
)
# tqdm's l_bar, bar and counts: "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}<..., rate]".
_TQDM = r"\d{1,3}%\|[^|]*\| *(?P<step>\d+)/(?P<total>\d+) +\[(?P<times>[^\]]{0,300})\]"
_ITERATIONS = re.compile(r"(?:\d|\?)(?:it/s|s/it)")  # a bar's unit: iterations, not bytes or examples
_TRAINING_BAR = re.compile(r"train|epoch|episode|step|iter|progress|batch", re.IGNORECASE)
_OPENRLHF_EPOCH_BAR = re.compile(r"train epoch\b", re.IGNORECASE)


@dataclass(frozen=True)
class StepPattern:
    """One default way a trainer prints its step: ``regex`` has a ``step`` group, maybe a ``total``."""

    framework: str
    example: str
    regex: re.Pattern[str]
    bare_bar: bool = False  # a tqdm bar without a description (HF Trainer)


_DESCRIBED_BAR = re.compile(rf"^(?P<description>[^|]*?): +{_TQDM}")
_BARE_BAR = re.compile(rf"^ *{_TQDM}")
_JSON = re.compile(
    r"""^\s*\{.*?["'](?:train/)?(?:step|global_step|training_iteration)["']\s*:\s*(?P<step>\d+)"""
)

_VERL = re.compile(r"^step:(?P<step>\d+) - ")
_NEMO_RL = re.compile(r"^=+ Step (?P<step>\d+)/(?P<total>\d+) =+$")
_AREAL = re.compile(r"\bTrain step (?P<step>\d+)/(?P<total>\d+) done\b")
_MEGATRON = re.compile(r"\biteration +(?P<step>\d+)/ *(?P<total>\d+) \|")
_DEEPSPEED = re.compile(r"\[Rank \d+\] step=(?P<step>\d+), skipped=\d+")
_TORCHTITAN = re.compile(r"(?<![\w/])step: *(?P<step>\d+) +loss:")
_RAY_TRAIN = re.compile(r"\bTraining finished iteration (?P<step>\d+)\b")
_RAY_TRAIN_TABLE = re.compile(r"^\W*training_iteration +(?P<step>\d+)\W*$")
_GENERIC = re.compile(r"\bstep[ :#]*(?P<step>\d+) *(?:/|of) *(?P<total>\d+)\b", re.IGNORECASE)
_MEGATRON_LINE = (
    " [2025-01-20 10:11:12] iteration      120/    5000 | consumed samples:        15360 |"
    " elapsed time per iteration (ms): 1147.6 | learning rate: 2.999E-04 | lm loss: 2.345678E+00 |"
)
_DEEPSPEED_LINE = (
    "[2025-01-20 10:11:12,167] [INFO] [logging.py:128:log_dist] [Rank 0] step=120, skipped=0,"
    " lr=[2.9e-05], mom=[(0.9, 0.999)]"
)
_TORCHTITAN_LINE = (
    "[titan] 2025-01-20 10:11:12,345 - root - INFO - step: 120  loss:  3.2514  grad_norm:  0.4521"
    "  memory: 61.20GiB(77.33%)  tps: 6,123  tflops: 290.12  mfu: 29.33%"
)
_RAY_TRAIN_LINE = "Training finished iteration 12 at 2025-01-20 10:11:12. Total running time: 5min 2s"
_BAR = "12%|█▏        | 12/100 [08:02<58:57, 40.20s/it]"

# The default patterns, in the order they are tried: framework, an example line in its format, regex.
# fmt: off
DEFAULT_PATTERNS: tuple[StepPattern, ...] = (
    StepPattern("verl (console logger)", "step:12 - actor/pg_loss:-0.004 - timing_s/step:41.234", _VERL),
    StepPattern("NeMo-RL", "========================= Step 12/100 =========================", _NEMO_RL),
    StepPattern("AReaL", "Epoch 1/3 Step 12/100 Train step 12/300 done.", _AREAL),
    StepPattern("Megatron-LM", _MEGATRON_LINE, _MEGATRON),
    StepPattern("DeepSpeed", _DEEPSPEED_LINE, _DEEPSPEED),
    StepPattern("torchtitan", _TORCHTITAN_LINE, _TORCHTITAN),
    StepPattern("Ray Train", _RAY_TRAIN_LINE, _RAY_TRAIN),
    StepPattern("Ray Train (result table)", "│ training_iteration          12 │", _RAY_TRAIN_TABLE),
    StepPattern("JSON lines", '{"step": 12, "loss": 1.234, "lr": 2.9e-05}', _JSON),
    StepPattern("JSON lines (HF, Ray Train)", "{'global_step': 12, 'loss': 1.234}", _JSON),
    StepPattern("verl (progress bar)", f"Training Progress:  {_BAR}", _DESCRIBED_BAR),
    StepPattern("OpenRLHF (SFT, RM, DPO)", f"Train step of epoch 0:  {_BAR}", _DESCRIBED_BAR),
    StepPattern("OpenRLHF (PPO)", f"Episode [1/1]:  {_BAR}", _DESCRIBED_BAR),
    StepPattern("SkyRL", f"Training Batches Processed:  {_BAR}", _DESCRIBED_BAR),
    StepPattern("PyTorch Lightning", "Epoch 0:  12%|█▏        | 120/1000 [00:10<01:20, 11.00it/s, v_num=0]",
                _DESCRIBED_BAR),
    StepPattern("HF Trainer", " 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]", _BARE_BAR, bare_bar=True),
    StepPattern("other trainers", "Step 12/100 | loss 1.234", _GENERIC),
)
# fmt: on

# Rates a line may show: tqdm's it/s and s/it, Megatron's milliseconds and verl's seconds per step.
_RATE = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>it/s|s/it)\b")
_MS_PER_ITERATION = re.compile(r"elapsed time per iteration \(ms\): (?P<value>\d+(?:\.\d+)?)")
_S_PER_STEP = re.compile(r"timing_s/step:(?P<value>\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Progress:
    """A training step: ``total`` when the text shows one, ``rate`` in steps per second when the text
    shows a rate, and ``line``, the line it was read from as a terminal shows it."""

    step: int
    total: int | None
    rate: float | None
    line: str


@dataclass(frozen=True)
class _Match:
    step: int
    total: int | None
    line: Line
    bare_bar: bool


def rate(line: str) -> float | None:
    """Steps per second as ``line`` shows them, or None."""
    if match := _RATE.search(line):
        value = float(match["value"])
        if match["unit"] == "it/s":
            return value
        return 1 / value if value else None
    for pattern, per_second in ((_MS_PER_ITERATION, 1000.0), (_S_PER_STEP, 1.0)):
        if match := pattern.search(line):
            value = float(match["value"])
            return per_second / value if value else None
    return None


def _is_training_bar(found: re.Match[str]) -> bool:
    """Whether ``found`` (a match of one of the patterns) is no tqdm bar, or a training bar's."""
    groups = found.groupdict()
    if "times" in groups and not _ITERATIONS.search(groups["times"]):
        return False
    description = groups.get("description")
    return description is None or (
        bool(_TRAINING_BAR.search(description)) and not _OPENRLHF_EPOCH_BAR.match(description)
    )


def _match(line: Line, patterns: tuple[StepPattern, ...], guarded: bool) -> _Match | None:
    """The first of ``patterns`` that reads ``line`` (with ``guarded``, not after a non-training word)."""
    for pattern in patterns:
        found = pattern.regex.search(line.message)
        if found is None:
            continue
        if guarded and (
            _NOT_TRAINING.search(line.message, 0, found.end("step")) or not _is_training_bar(found)
        ):
            return None
        total = found.groupdict().get("total")
        return _Match(int(found["step"]), int(total) if total else None, line, pattern.bare_bar)
    return None


def _latest(matches: list[_Match]) -> Progress | None:
    """The last of ``matches``, its total borrowed from an earlier line when it shows none."""
    if not matches:
        return None
    last = matches[-1]
    total = last.total
    if total is None:
        earlier = (m.total for m in reversed(matches) if m.total is not None and m.total >= last.step)
        total = next(earlier, None)
    return Progress(last.step, total, rate(last.line.message), last.line.shown)


def custom_pattern(step_regex: str) -> StepPattern:
    """A user's pattern: a regex with a named group ``step`` (and maybe ``total``); ValueError if not."""
    try:
        regex = re.compile(step_regex)
    except re.error as error:
        raise ValueError(f"not a regular expression: {step_regex!r}: {error}") from None
    if "step" not in regex.groupindex:
        raise ValueError(f"{step_regex!r} has no named group 'step', e.g. 'iter (?P<step>\\d+)'")
    return StepPattern("--step-regex", "", regex)


def progress(text: str, step_regex: str | None = None) -> Progress | None:
    """The latest training step in ``text``, or None when it shows none.

    ``step_regex`` replaces :data:`DEFAULT_PATTERNS`: a regex with a named group ``step`` (and maybe
    ``total``), applied to the cleaned lines without the non-training guard. ``total`` comes from the
    step's line, or else from the latest earlier line that showed a total at least as large.
    """
    patterns = (custom_pattern(step_regex),) if step_regex is not None else DEFAULT_PATTERNS
    guarded = step_regex is None
    matches: list[_Match] = []
    bare_total: int | None = None  # the total of the first bar without a description: the training bar
    for line in lines(text):
        match = _match(line, patterns, guarded)
        if match is None:
            continue
        if match.bare_bar:
            bare_total = match.total if bare_total is None else bare_total
            if match.total != bare_total:
                continue  # an evaluation bar
        matches.append(match)
    return _latest(matches)
