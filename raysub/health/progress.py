"""The latest training step a log shows, from the lines trainers print (:data:`DEFAULT_PATTERNS`), with
the time a step takes and the throughput the log states.

Lines are read as :mod:`raysub.health.text` cleans them (Ray, rank and MPI prefixes, ANSI escapes,
tqdm's carriage-return debris and forwarders' ``#015`` undone). A line counts only when one of the
patterns matches it and nothing on the line up to the step number speaks of evaluation, validation,
tests, generation, rollouts, sampling, inference, checkpoints, saving or loading: evaluation bars,
``Saving checkpoint to .../global_step_100`` and the like are not training progress. The first pattern
of the table that matches a line is the one that reads it; a user's ``step_regex`` replaces the table
and is trusted without that guard.

tqdm bars count only when their counts are followed by `` [``, the start of tqdm's
``[elapsed<remaining, rate]`` (so a bar cut inside its numbers never counts, while one cut after them
does), their unit is ``it`` (not bytes) and their description names training (a step, an epoch, an
episode, a batch, "Train", "Progress"), except OpenRLHF's ``Train epoch`` bars, which count epochs or
the updates inside one step. Three traps of bars are answered "unknown"
rather than guessed:

- HF Trainer prints its training and its evaluation bars without a description: the first such bar's
  total is taken as the training bar's, and a later bar without a description and with another total
  is an evaluation bar.
- PyTorch Lightning 1.x counts validation batches on the epoch bar: when an epoch bar moves on while a
  validation bar has not finished, its counts are no training steps anywhere in the text. The bar's own
  ``global_step=N`` (a logged metric) is read instead when it shows one.
- Two processes drawing the same bar (ranks without a prefix): when a bar that had not finished shows a
  smaller count than before, the latest count is not the furthest, and no answer is given until the bar
  passes its furthest count again.

The time a step takes (:func:`seconds_per_step`) and the throughput (:func:`throughput`) come from the
step's own line, or else from the latest line after it that states them (HF Trainer's metrics dict after
its bar); the latest earlier step line that states them stands in when neither does.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import chain
from typing import TypeVar

from raysub.health.text import Line, lines
from raysub.protocol.step_sources import step_regex_problem

_T = TypeVar("_T")
# Words that make a match no training progress when they stand on its line before the step number.
_NOT_TRAINING = re.compile(
    r"eval|valid|\btest|sanity|predict|generat|rollout|\bsampl(?:e\b|ing)|infer|checkpoint|\bsav(?:e|ing)\b|load",
    re.IGNORECASE,
)
# tqdm's l_bar, bar and counts: "{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [{elapsed}<..., rate]".
# A line cut after the counts (by a forwarder, or two writers) still shows them whole; its times may be cut.
_TQDM = r"\d{1,3}%\|[^|]*\| *(?P<step>\d+)/(?P<total>\d+) +\[(?P<times>[^\]]{0,300})(?P<end>\]|$)"
_ITERATIONS = re.compile(r"(?:\d|\?) ?(?:it/s|s/it)")  # a bar's unit: iterations, not bytes or examples
_TRAINING_BAR = re.compile(r"train|epoch|episode|step|iter|progress|batch|loss", re.IGNORECASE)
_OPENRLHF_EPOCH_BAR = re.compile(r"train epoch\b", re.IGNORECASE)
_VALIDATION_BAR = re.compile(rf"^(?:Validati\w*|Validation DataLoader \d+): +{_TQDM}")
_POSTFIX_GLOBAL_STEP = re.compile(r"\bglobal_step=(?P<step>\d+)(?:\.0)?\b")


@dataclass(frozen=True)
class StepPattern:
    """One default way a trainer prints its step: ``regex`` has a ``step`` group, maybe a ``total``."""

    framework: str
    example: str
    regex: re.Pattern[str]
    bare_bar: bool = False  # a tqdm bar without a description (HF Trainer)
    # Where the counter may count the steps of one epoch: "line" (an epoch named before the step on the
    # line, or in a bar's description or postfix), "keras" (the latest "Epoch k/E" line before it).
    epochs: str = ""


_DESCRIBED_BAR = re.compile(rf"^(?P<description>[^|]*?): +{_TQDM}")
# torchtune's description is "{epoch}|{step}|Loss: {loss}", pipes and all.
_TORCHTUNE_BAR = re.compile(rf"^(?P<description>\d+\|\d+\|Loss: [^|:]*): +{_TQDM}")
# A bar whose total is unknown (an iterable dataset): "{desc}: |{bar}| {n}/? [{elapsed}<..., rate]".
_OPEN_BAR = re.compile(
    r"^(?P<description>[^|]*?): +\|[^|]*\| *(?P<step>\d+)/\? +\[(?P<times>[^\]]{0,300})(?P<end>\]|$)"
)
_BARE_BAR = re.compile(rf"^ *{_TQDM}")
_JSON = re.compile(
    r"""(?:^\s*|>> )\{.*?["'](?:train/)?(?:step|global_step|training_iteration)["']\s*:\s*(?P<step>\d+)"""
)

# verl's console logger; its SFT trainer glues the line behind its epoch bar ("...13.14s/it]step:105 - ").
_VERL = re.compile(r"(?:^|(?<=\]))step:(?P<step>\d+) - ")
_NEMO_RL = re.compile(r"^=+ Step (?P<step>\d+)/(?P<total>\d+) =+$")
_AREAL = re.compile(r"\bTrain step (?P<step>\d+)/(?P<total>\d+) done\b")
_MEGATRON = re.compile(r"\biteration +(?P<step>\d+)/ *(?P<total>\d+) \|")
_NEMO_2 = re.compile(r"^Training epoch \d+, iteration (?P<step>\d+)/(?P<total>\d+) \|")
_DEEPSPEED = re.compile(r"\[Rank \d+\] step=(?P<step>\d+), skipped=\d+")
_DEEPSPEED_PIPELINE = re.compile(r"^steps: (?P<step>\d+) loss: ")
_TORCHTITAN = re.compile(r"(?<![\w/])step: *(?P<step>\d+) +loss:")
_MAXTEXT = re.compile(r"\bcompleted step: (?P<step>\d+), seconds: ")
_LLMC = re.compile(r"^step +(?P<step>\d+)(?:/(?P<total>\d+) \||: train loss )")
_NANOGPT = re.compile(r"^iter (?P<step>\d+): loss [\d.]+, time ")
_LLAMA2C = re.compile(r"^(?P<step>\d+) \| loss [\d.]+ \| lr \S+ \| [\d.]+ms \|")
_LITGPT = re.compile(r"\| iter +\d+ step +(?P<step>\d+) \|")
_TF = re.compile(r"\bglobal step (?P<step>\d+): loss = ")
_KERAS = re.compile(r"^ *(?P<step>\d+)/(?P<total>\d+) \[[=>.]+\] - ")
_METRIC_LOGGER = re.compile(r"\bEpoch:? ?\[\d+(?:/\d+)?\] *\[ *(?P<step>\d+)/(?P<total>\d+)\]")
_DLLOGGER = re.compile(r"^DLL .* Training Iteration: (?P<step>\d+)\b")
_AUTOMODEL = re.compile(r"\| step (?P<step>\d+) \| epoch \d+ \|")
_SLIME = re.compile(r"\btrain_metric_utils\.py:\d+ - perf (?P<step>\d+): \{")
_RAY_TRAIN = re.compile(r"\bTraining finished iteration (?P<step>\d+)\b")
_RAY_TRAIN_V2 = re.compile(r"\bReporting training result (?P<step>\d+)\b")
_RAY_TRAIN_TABLE = re.compile(r"^\W*training_iteration[ :]+(?P<step>\d+)\W*$")
_GENERIC = re.compile(r"\bstep[ :#]*(?P<step>\d+) *(?:/|of) *(?P<total>\d+)\b", re.IGNORECASE)
# An epoch (or an episode) a counter's line names before the counter: "Epoch 3/3:" and "Episode [1/30]"
# count from 1 ("k of E"), "Epoch 1:" (Lightning) and "Train step of epoch 0" from 0; a bar's postfix
# "epoch=2/250" from 1; MetricLogger's "Epoch: [2]" from 0 and mmcv's "Epoch [1][" from 1.
_EPOCH = re.compile(r"\b(?:epoch|episode)\b\W{0,3}(?P<epoch>\d+)(?P<of>/\d+)?", re.IGNORECASE)
_METRIC_LOGGER_EPOCH = re.compile(r"\bEpoch(?P<colon>:?) ?\[(?P<epoch>\d+)")
_KERAS_EPOCH = re.compile(r"^Epoch (?P<epoch>\d+)/\d+$")
# verl's trainer closes its "Training Progress" bar in the last step without the last update.
_VERL_BAR = "Training Progress"
_MEGATRON_LINE = (
    " [2025-01-20 10:11:12] iteration      120/    5000 | consumed samples:        15360 |"
    " elapsed time per iteration (ms): 1147.6 | throughput per GPU (TFLOP/s/GPU): 224.0 |"
    " learning rate: 2.999E-04 | lm loss: 2.345678E+00 |"
)
_DEEPSPEED_LINE = (
    "[2025-01-20 10:11:12,167] [INFO] [logging.py:128:log_dist] [Rank 0] step=120, skipped=0,"
    " lr=[2.9e-05], mom=[(0.9, 0.999)]"
)
_TORCHTITAN_LINE = (
    "[titan] 2025-01-20 10:11:12,345 - root - INFO - step: 120  loss:  3.2514  grad_norm:  0.4521"
    "  memory: 61.20GiB(77.33%)  tps: 6,123  tflops: 290.12  mfu: 29.33%"
)
_MAXTEXT_LINE = (
    "completed step: 120, seconds: 10.344, TFLOP/s/device: 346.932, Tokens/s/device: 19006.461,"
    " total_weights: 1572864, loss: 2.979"
)
_AUTOMODEL_LINE = (
    "2025-01-20 10:11:12 | INFO | root | step 120 | epoch 0 | loss 0.6742 | grad_norm 1.1909 |"
    " lr 1.00e-05 | mem 25.57 GiB | tps 32772.58(4096.57/gpu) | num_label_tokens 47365"
)
_RAY_TRAIN_LINE = "Training finished iteration 12 at 2025-01-20 10:11:12. Total running time: 5min 2s"
_BAR = "12%|█▏        | 12/100 [08:02<58:57, 40.20s/it]"

# The default patterns, in the order they are tried: framework, an example line in its format, regex.
# fmt: off
DEFAULT_PATTERNS: tuple[StepPattern, ...] = (
    StepPattern("verl (console logger)", "step:12 - actor/pg_loss:-0.004 - timing_s/step:41.234", _VERL),
    StepPattern("NeMo-RL", "========================= Step 12/100 =========================", _NEMO_RL),
    StepPattern("AReaL", "Epoch 1/3 Step 12/100 Train step 12/300 done.", _AREAL),
    StepPattern("Megatron-LM, Megatron-DeepSpeed, GPT-NeoX", _MEGATRON_LINE, _MEGATRON),
    StepPattern("NeMo 2.x", "Training epoch 0, iteration 120/149 | lr: 3e-05 | global_step: 120 |"
                " reduced_train_loss: 1.34 | train_step_timing in s: 0.03147", _NEMO_2),
    StepPattern("DeepSpeed", _DEEPSPEED_LINE, _DEEPSPEED),
    StepPattern("DeepSpeed (pipeline)", "steps: 120 loss: 2.3456 iter time (s): 3.106 samples/sec: 0.322",
                _DEEPSPEED_PIPELINE),
    StepPattern("torchtitan", _TORCHTITAN_LINE, _TORCHTITAN),
    StepPattern("MaxText", _MAXTEXT_LINE, _MAXTEXT),
    StepPattern("llm.c", "step  120/74 | loss 3.2514 | norm 0.4521 | lr 3.00e-04 | 36.74 ms | 9.1% bf16 MFU"
                " | 111854 tok/s", _LLMC),
    StepPattern("nanoGPT", "iter 120: loss 3.8716, time 562.80ms, mfu 31.20%", _NANOGPT),
    StepPattern("llama2.c", "120 | loss 5.3185 | lr 4.986305e-05 | 9852.73ms | mfu 0.19%", _LLAMA2C),
    StepPattern("LitGPT", "Epoch 0 | iter  120 step  120 | loss train: 3.500 | iter time: 38.183 s (step)",
                _LITGPT),
    StepPattern("TensorFlow (slim)", "INFO:tensorflow:global step 120: loss = 1.0720 (1.967 sec/step)", _TF),
    StepPattern("Keras", "120/423 [=====>........................] - ETA: 2:10 - loss: 0.9081", _KERAS,
                epochs="keras"),
    StepPattern("MetricLogger (DeiT, MAE, DINO, mmcv)", "Epoch: [0]  [120/1251]  eta: 0:19:01  lr: 0.000201"
                "  loss: 6.8581 (6.8779)  time: 1.0508  data: 0.0011  max mem: 8249", _METRIC_LOGGER,
                epochs="line"),
    StepPattern("DLLogger", "DLL 2022-04-05 02:27:41.304046 - Training Epoch: 1 Training Iteration: 120"
                "  step_loss : 1.4575", _DLLOGGER),
    StepPattern("NeMo AutoModel", _AUTOMODEL_LINE, _AUTOMODEL),
    StepPattern("slime", "[2026-01-05 12:20:29] train_metric_utils.py:44 - perf 12: {'perf/step_time': 14.18,"
                " 'perf/actor_train_tok_per_s': 2355.64}", _SLIME),
    StepPattern("Ray Train", _RAY_TRAIN_LINE, _RAY_TRAIN),
    StepPattern("Ray Train v2", "Reporting training result 12: TrainingReport(checkpoint=None,"
                " metrics={'loss': 0.5}, validation=False) from rank 0", _RAY_TRAIN_V2),
    StepPattern("Ray Train, Tune (result table)", "│ training_iteration          12 │", _RAY_TRAIN_TABLE),
    StepPattern("JSON lines", '{"step": 12, "loss": 1.234, "lr": 2.9e-05}', _JSON),
    StepPattern("JSON lines (HF, Ray Train)", "{'global_step': 12, 'loss': 1.234}", _JSON),
    StepPattern("verl (progress bar)", f"Training Progress:  {_BAR}", _DESCRIBED_BAR, epochs="line"),
    StepPattern("OpenRLHF (SFT, RM, DPO)", f"Train step of epoch 0:  {_BAR}", _DESCRIBED_BAR, epochs="line"),
    StepPattern("OpenRLHF (PPO)", f"Episode [1/1]:  {_BAR}", _DESCRIBED_BAR, epochs="line"),
    StepPattern("SkyRL", f"Training Batches Processed:  {_BAR}", _DESCRIBED_BAR, epochs="line"),
    StepPattern("torchtune", f"1|120|Loss: 1.5955958366394043:  {_BAR}", _TORCHTUNE_BAR),
    StepPattern("PyTorch Lightning", "Epoch 0:  12%|█▏        | 120/1000 [00:10<01:20, 11.00it/s, v_num=0]",
                _DESCRIBED_BAR, epochs="line"),
    StepPattern("PyTorch Lightning (iterable dataset)", "Epoch 0: |          | 43/? [00:26<00:00, 1.65it/s]",
                _OPEN_BAR, epochs="line"),
    StepPattern("HF Trainer", " 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]", _BARE_BAR, bare_bar=True,
                epochs="line"),
    StepPattern("other trainers", "Step 12/100 | loss 1.234", _GENERIC, epochs="line"),
)
# fmt: on

_NCCL = "NCCL INFO "
# Every default pattern needs one of these (in lower case) on its line: most lines of a log are no step
# line, and a search for them is much cheaper than trying every pattern.
_STEP_WORDS = ("step", "iter", "epoch", "%|", "/? [", "| loss", "perf ", "] - ", "training result")
# A step's time or throughput on a line of its own is read this many lines around the step's line at most.
NEARBY = 64
# HF Trainer's header before the bar of an evaluation or a prediction (after training, too).
_HF_EVALUATION = re.compile(r"\*{5} Running (?:Evaluation|Prediction) \*{5}")
# Lines that state the run's total steps without a step of their own: HF Trainer's header, unsloth's
# banner, verl's SFT trainer.
_TOTAL_LINE = re.compile(r"\b(?:Total (?:optimization )?steps = |total number of steps )(?P<total>\d+)$")

# How long a step took, as lines state it: (regex with a ``value`` group, seconds per unit of value;
# a negative number means the value is a rate, that many steps per second per unit).
_NUMBER = r"(?P<value>\d+(?:\.\d+)?)"
_SECONDS: tuple[tuple[re.Pattern[str], float], ...] = (
    # A trainer's own timer first: tqdm's rate is an average over the last updates, not the last step.
    (re.compile(rf"Finished: 'step', time cost: {_NUMBER}s"), 1.0),  # SkyRL
    (re.compile(rf"\biter time \(s\): {_NUMBER}"), 1.0),  # DeepSpeed's steps line
    # tqdm writes "4.10s/it"; other loggers put a space before the unit ("4.1 s/it").
    (re.compile(rf"{_NUMBER} ?s/it\b"), 1.0),
    (re.compile(rf"{_NUMBER} ?it/s\b"), -1.0),
    (re.compile(rf"elapsed time per iteration \(ms\): {_NUMBER}"), 0.001),  # Megatron
    (re.compile(rf"timing_s/step:{_NUMBER}"), 1.0),  # verl
    (re.compile(rf"train_step_timing in s: {_NUMBER}"), 1.0),  # NeMo 2.x
    (re.compile(rf"\bseconds: {_NUMBER}"), 1.0),  # MaxText
    (re.compile(rf"\| {_NUMBER} ?ms \|"), 0.001),  # llm.c, llama2.c
    (re.compile(rf"\(took {_NUMBER} ms\)"), 0.001),  # llm.c (early)
    (re.compile(rf"\btime {_NUMBER}ms\b"), 0.001),  # nanoGPT
    (re.compile(rf"\biter time: {_NUMBER} ?s\b"), 1.0),  # LitGPT
    (re.compile(rf"\({_NUMBER} sec/step\)"), 1.0),  # TensorFlow
    (re.compile(rf"\b{_NUMBER}ms/step\b"), 0.001),  # Keras
    (re.compile(rf"\b{_NUMBER}s/step\b"), 1.0),
    (re.compile(rf"(?<![\w/])time: {_NUMBER}(?:,|\s|$)"), 1.0),  # MetricLogger, mmcv
)
# The same, on lines of their own near the step's line (a metrics dict, a result table's row).
_DETACHED_SECONDS: tuple[tuple[re.Pattern[str], float], ...] = (
    (re.compile(rf"'train_step_runtime': {_NUMBER}"), 1.0),  # HF Trainer's metrics dict
    (re.compile(rf"^\W*time_this_iter_s[: ]+{_NUMBER}"), 1.0),  # Ray Train, Tune
    (re.compile(rf"'perf/step_time': {_NUMBER}"), 1.0),  # slime
    (re.compile(rf"'timing/step': '?{_NUMBER}"), 1.0),  # SkyRL's metrics dict
    (re.compile(rf"Finished: 'step', time cost: {_NUMBER}s"), 1.0),  # SkyRL
)
TOKENS, TOKENS_PER_DEVICE, SAMPLES = "tokens/s", "tokens/s/device", "samples/s"
TFLOPS, TFLOPS_PER_DEVICE = "TFLOP/s", "TFLOP/s/device"
_FIGURE = r"(?P<value>\d[\d,]*(?:\.\d+)?)"
# The throughput a line states, in order of preference (tokens, then samples, then FLOPs): regex, unit.
_THROUGHPUTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\btps {_FIGURE}\("), TOKENS),  # NeMo AutoModel: global, then per GPU
    (re.compile(rf"\b{_FIGURE} tok/s\b"), TOKENS),  # llm.c
    (re.compile(rf"\btokens per gpu per second \(tgs\): {_FIGURE}"), TOKENS_PER_DEVICE),  # Megatron-DeepSpeed
    (re.compile(rf"\bperf/throughput:{_FIGURE}"), TOKENS_PER_DEVICE),  # verl: tokens / (step time x GPUs)
    (re.compile(rf"\btps: {_FIGURE}"), TOKENS_PER_DEVICE),  # torchtitan
    (re.compile(rf"\bTokens/s/device: {_FIGURE}"), TOKENS_PER_DEVICE),  # MaxText
    (re.compile(rf"\bsamples per second: {_FIGURE}"), SAMPLES),  # Megatron-DeepSpeed
    (re.compile(rf"(?<![\w/])samples/sec: {_FIGURE}"), SAMPLES),  # GPT-NeoX, DeepSpeed's pipeline
    (re.compile(rf"\(TFLOP/s/GPU\): {_FIGURE}"), TFLOPS_PER_DEVICE),  # Megatron-LM
    (re.compile(rf"\bTFLOP/s/device: {_FIGURE}"), TFLOPS_PER_DEVICE),  # MaxText
    (re.compile(rf"\bTFLOP/s: {_FIGURE}"), TFLOPS_PER_DEVICE),  # MaxText (early)
)
_DETACHED_THROUGHPUTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"'perf/actor_train_tok_per_s': {_FIGURE}"), TOKENS),  # slime
    (re.compile(rf"'train_(?:step_)?samples_per_second': {_FIGURE}"), SAMPLES),  # HF Trainer
    (re.compile(rf"\bSamplesPerSec={_FIGURE}"), SAMPLES),  # DeepSpeed's timer (older releases)
    (re.compile(rf'"overall_throughput": {_FIGURE}'), SAMPLES),  # InstructLab's metrics JSON
)

# Every line either tuple above reads holds one of these words, so a line between two steps that holds
# none is passed over without trying the patterns (tests/unit/test_health_progress.py checks each names one).
_DETACHED_WORDS = ("tim", "amples", "perf/", "throughput")


@dataclass(frozen=True)
class Throughput:
    """What a log says it processes per second: ``value`` in ``unit`` (tokens/s, tokens/s/device,
    samples/s, TFLOP/s or TFLOP/s/device)."""

    value: float
    unit: str

    def __str__(self) -> str:
        figure = f"{self.value:,.0f}" if self.value >= 100 else f"{self.value:.3g}"
        return f"{figure} {self.unit}"


@dataclass(frozen=True)
class Progress:
    """A training step: ``total`` when the text shows one, ``seconds_per_step`` and ``throughput`` when
    the text states them, and ``line``, the line the step was read from as a terminal shows it."""

    step: int
    total: int | None
    seconds_per_step: float | None
    throughput: Throughput | None
    line: str


@dataclass(frozen=True)
class StepPoint:
    """A step line of a log, for drawing the steps over a whole run: ``number``, the line's (from 1); ``t``,
    what the line's own leading timestamp names, read as UTC (the log does not say its time zone), or None
    when it has none; the step; and the throughput stated on the line or on its own line after it, before
    the next step line."""

    number: int
    t: float | None
    step: int
    throughput: Throughput | None


@dataclass(frozen=True)
class _Nearby:
    """What the lines between two step lines state on lines of their own, read once as the later step
    line comes, so that a long log keeps no lines but the step lines': the first throughput (the earlier
    step's, as points() reads it), and the last time a step took and throughput (the later step's, as
    latest() reads them, nearest first)."""

    first_throughput: Throughput | None = None
    last_seconds: float | None = None
    last_throughput: Throughput | None = None

    @classmethod
    def of(cls, messages: Iterable[str]) -> _Nearby:
        first_rate = last_rate = last_seconds = None
        for message in messages:
            if not any(word in message for word in _DETACHED_WORDS):
                continue
            rate = throughput(message, _DETACHED_THROUGHPUTS)
            seconds = seconds_per_step(message, _DETACHED_SECONDS)
            first_rate = first_rate or rate
            last_rate = rate or last_rate
            last_seconds = last_seconds if seconds is None else seconds
        if first_rate is None and last_seconds is None:
            return _NOTHING_NEARBY
        return cls(first_rate, last_seconds, last_rate)


_NOTHING_NEARBY = _Nearby()


@dataclass(frozen=True)
class _Match:
    step: int
    total: int | None
    line: Line
    bar: tuple[str, int] | None = None  # (description, total) of a tqdm bar
    global_step: int | None = None  # the bar's own global_step=N
    bare_bar: bool = False
    timed: bool = True  # whether the line's times and rates are those of training steps
    framework: str = ""  # the pattern's that read it
    before: _Nearby = _NOTHING_NEARBY  # what the lines between the previous step line and this one state
    not_a_step: str | None = None  # why the count is no step of the run (an epoch's count, an open end)


def seconds_per_step(
    line: str, patterns: tuple[tuple[re.Pattern[str], float], ...] = _SECONDS
) -> float | None:
    """Seconds a step took as ``line`` states it, or None."""
    for pattern, unit in patterns:
        if (match := pattern.search(line)) and (value := float(match["value"])):
            return value * unit if unit > 0 else 1 / (value * -unit)
    return None


def throughput(
    line: str, patterns: tuple[tuple[re.Pattern[str], str], ...] = _THROUGHPUTS
) -> Throughput | None:
    """The throughput ``line`` states, or None."""
    for pattern, unit in patterns:
        if match := pattern.search(line):
            return Throughput(float(match["value"].replace(",", "")), unit)
    return None


def _is_training_bar(found: re.Match[str]) -> bool:
    """Whether ``found`` (a match of one of the patterns) is no tqdm bar, or a training bar's."""
    groups = found.groupdict()
    if "times" in groups and groups["end"] and not _ITERATIONS.search(groups["times"]):
        return False  # a whole bar in another unit (a cut bar's unit is not shown)
    description = groups.get("description")
    return description is None or (
        bool(_TRAINING_BAR.search(description)) and not _OPENRLHF_EPOCH_BAR.match(description)
    )


def _match(line: Line, patterns: tuple[StepPattern, ...], guarded: bool) -> _Match | None:
    """The first of ``patterns`` that reads ``line`` (with ``guarded``, not after a non-training word)."""
    if guarded and not any(word in line.message.lower() for word in _STEP_WORDS):
        return None
    for pattern in patterns:
        found = pattern.regex.search(line.message)
        if found is None:
            continue
        if guarded and (
            _NOT_TRAINING.search(line.message, 0, found.end("step")) or not _is_training_bar(found)
        ):
            return None
        groups = found.groupdict()
        total = int(groups["total"]) if groups.get("total") else None
        not_a_step = _epoch_count(pattern, found)
        if "times" not in groups or total is None:
            return _Match(int(found["step"]), total, line, framework=pattern.framework, not_a_step=not_a_step)
        postfix = _POSTFIX_GLOBAL_STEP.search(groups["times"])
        description = groups.get("description") or ""
        if description == _VERL_BAR and int(found["step"]) == total - 1:
            not_a_step = (
                f"verl closes its bar in the last step without counting it: {found['step']}/{total} may "
                "be the end"
            )
        return _Match(
            int(found["step"]),
            total,
            line,
            bar=(description, total),
            global_step=int(postfix["step"]) if postfix else None,
            bare_bar=pattern.bare_bar,
            framework=pattern.framework,
            not_a_step=not_a_step,
        )
    return None


def _first_epoch(epoch: int, one_based: bool) -> bool:
    return epoch == 0 or (epoch == 1 and one_based)


def _epoch_count(pattern: StepPattern, found: re.Match[str]) -> str | None:
    """Why ``found``'s count is an epoch's and not the run's, or None: a count inside an epoch is the
    run's step only in the run's first epoch."""
    if pattern.epochs != "line":
        return None
    groups = found.groupdict()
    before = found.string[: found.start("step")]
    named = _METRIC_LOGGER_EPOCH.search(before) if pattern.regex is _METRIC_LOGGER else None
    if named is not None:
        first = _first_epoch(int(named["epoch"]), one_based=not named["colon"])
    elif epoch := _EPOCH.search(f"{groups.get('description') or before} {groups.get('times') or ''}"):
        first = _first_epoch(int(epoch["epoch"]), one_based=bool(epoch["of"]))
    else:
        return None
    return None if first else f"{found.group().strip()[:60]!r} counts the steps of one epoch, not of the run"


class _Reading:
    """What :func:`progress` has read of a text so far."""

    def __init__(self, patterns: tuple[StepPattern, ...], guarded: bool) -> None:
        self.patterns = patterns
        self.guarded = guarded
        self.matches: list[_Match] = []
        self.since: deque[str] = deque(maxlen=NEARBY)  # the last lines after the latest step line
        self.bare_total: int | None = None  # the first bar without a description: the training bar
        self.total_line: int | None = None  # a total stated on a line of its own
        self.validation_open = False  # a validation bar has been drawn and has not finished
        self.evaluating = False  # HF Trainer said it runs an evaluation or a prediction
        self.counts_validation: set[str] = set()  # bars that moved on while validating (Lightning 1.x)
        self.furthest: dict[tuple[str, int], int] = {}
        self.two_writers: set[tuple[str, int]] = set()
        self.keras_epoch: int | None = None  # Keras's latest "Epoch k/E" line

    def read(self, line: Line) -> None:
        if _NCCL in line.message:
            return  # NCCL_DEBUG=INFO's many lines (the job script sets it) are never progress: skipped fast
        if self.guarded and (validation := _VALIDATION_BAR.match(line.message)):
            self.validation_open = validation["step"] != validation["total"]
            return
        match = _match(line, self.patterns, self.guarded)
        if match is None:
            if self.guarded and (stated := _TOTAL_LINE.search(line.message)):
                self.total_line = int(stated["total"])
            if self.guarded and (epoch := _KERAS_EPOCH.match(line.message)):
                self.keras_epoch = int(epoch["epoch"])
            self.evaluating = self.evaluating or bool(_HF_EVALUATION.search(line.message))
            self.since.append(line.message)
            return
        if match.bare_bar:
            if self.evaluating and match.total != self.bare_total:
                return  # an evaluation bar, maybe the first bar of the text
            self.evaluating = False
            self.bare_total = match.total if self.bare_total is None else self.bare_total
            if match.total != self.bare_total:
                return  # an evaluation bar
        if match.bar:
            self._follow_bar(match)
        if match.framework == "Keras" and self.keras_epoch != 1:
            # Keras counts the steps of each epoch ("Epoch k/E" before them): the run's only in the first.
            shown = f"epoch {self.keras_epoch}" if self.keras_epoch else "its epoch not shown"
            match = replace(match, not_a_step=f"Keras counts the steps of one epoch ({shown})")
        self.matches.append(replace(match, before=_Nearby.of(self.since)))
        self.since.clear()

    def _follow_bar(self, match: _Match) -> None:
        assert match.bar is not None
        description, total = match.bar
        previous = self.matches[-1] if self.matches else None
        if self.validation_open and previous and previous.bar == match.bar and match.step > previous.step:
            self.counts_validation.add(description)
        furthest = self.furthest.get(match.bar, -1)
        if match.step < furthest < total:
            self.two_writers.add(match.bar)
        if match.step >= furthest or furthest == total:
            self.furthest[match.bar] = match.step

    def _usable(self, match: _Match) -> _Match | None:
        """``match`` as a training step, or None when its count is no training step."""
        if (match.bar and match.bar[0] in self.counts_validation) or match.not_a_step:
            if match.global_step is None:
                return None
            # The bar's times and rate are those of training and validation batches together.
            return replace(match, step=match.global_step, total=None, bar=None, timed=False)
        return match

    def _total(self, last: _Match, usable: list[_Match]) -> int | None:
        """``last``'s total, or else the latest earlier one at least as large (a bar's is its own, unless
        a line of its own states another: then neither is sure)."""
        if last.bar and self.total_line is not None and last.total != self.total_line:
            return None
        if last.total is not None or last.bar:
            return last.total
        earlier = [m.total for m in usable if m.total is not None and m.total >= last.step]
        if self.total_line is not None and self.total_line >= last.step:
            earlier.append(self.total_line)
        return earlier[-1] if earlier else None

    def unknown(self) -> str | None:
        """Why :meth:`latest` gives no step, when a line showed a count that is none: None otherwise."""
        if not self.matches:
            return None
        final = self.matches[-1]
        if final.not_a_step:
            return final.not_a_step
        if final.bar and final.bar[0] in self.counts_validation:
            return f"the bar {final.bar[0]!r} counts validation batches too"
        if final.bar in self.two_writers:
            return f"two processes draw the bar {final.bar[0]!r} and the latest count is not the furthest"
        return None

    def latest(self) -> Progress | None:
        usable = [m for m in map(self._usable, self.matches) if m is not None]
        if self.matches and (not usable or usable[-1].line is not self.matches[-1].line):
            # The latest count is no step of the run: an earlier one of the same counter would be stale,
            # while another counter (verl's step line behind its epoch bar) still says the run's step.
            usable = [m for m in usable if m.framework != self.matches[-1].framework]
        if not usable:
            return None
        last = usable[-1]
        if last.bar in self.two_writers and last.step < self.furthest[last.bar]:
            return None
        seconds: float | None = None
        rate: Throughput | None = None
        if last.timed:
            # Earlier lines of the same format only: another trainer's (a run that changed stacks, a
            # library's own counter next to the trainer's) measures something else.
            same = [m for m in usable if m.timed and m.framework == last.framework]
            earlier = (m.line.message for m in reversed(same[-NEARBY:-1]))
            seconds = _first(
                chain(
                    (seconds_per_step(last.line.message),),
                    (seconds_per_step(line, _DETACHED_SECONDS) for line in self.since),
                    (last.before.last_seconds,),
                    (_between_stamps(same),),
                    (seconds_per_step(line) for line in earlier),
                )
            )
            rate = _first(
                chain(
                    (throughput(last.line.message),),
                    (throughput(line, _DETACHED_THROUGHPUTS) for line in self.since),
                    (last.before.last_throughput,),
                    (throughput(line) for line in earlier),
                )
            )
        return Progress(last.step, self._total(last, usable), seconds, rate, last.line.shown)

    def points(self) -> list[StepPoint]:
        """Every training step the text shows, as :meth:`latest` would have answered at its line: a
        count that is no training step is left out, and so is a bar's count below the furthest it
        reached when two processes draw that bar. A step shown again (a bar redrawn) is one point."""
        usable = [m for m in map(self._usable, self.matches) if m is not None]
        after = [*(m.before for m in usable[1:]), _Nearby.of(self.since)] if usable else []
        furthest: dict[tuple[str, int], int] = {}
        points: list[StepPoint] = []
        for match, following in zip(usable, after, strict=True):
            if match.bar in self.two_writers:
                assert match.bar is not None
                if match.step < furthest.get(match.bar, -1):
                    continue
                furthest[match.bar] = match.step
            if points and points[-1].step == match.step:
                continue
            rate = None
            if match.timed:
                rate = throughput(match.line.message) or following.first_throughput
            stamp = _stamp(match.line.message)
            points.append(StepPoint(match.line.number, stamp and stamp[0], match.step, rate))
        return points


def _first(values: Iterable[_T | None]) -> _T | None:
    return next((value for value in values if value is not None), None)


# A date and time at the start of a line (after a bracket or a log-level letter and date, as glog):
# 2026-02-24 19:46:17,508 / 2022-04-05 02:27:41.304046 / [2023-07-25 21:03:17,269]. Seconds are read
# to the precision printed; without a fraction, only an interval of MIN_STAMPED_INTERVAL or more counts.
_STAMP = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<fraction>\d{1,6}))?"
)
MIN_STAMPED_INTERVAL = 20.0


def _stamp(message: str) -> tuple[float, bool] | None:
    """The time a line's leading timestamp names (seconds since the epoch, as UTC) and whether it has a
    fraction of a second, or None."""
    found = _STAMP.search(message, 0, 80)
    if found is None:
        return None
    try:
        moment = datetime.fromisoformat(f"{found['date']}T{found['time']}+00:00")
    except ValueError:
        return None
    fraction = found["fraction"]
    return moment.timestamp() + (float(f"0.{fraction}") if fraction else 0.0), bool(fraction)


def _between_stamps(matches: list[_Match]) -> float | None:
    """Seconds per step from the timestamps of the latest two step lines with different steps, as a
    reader would work it out; None without timestamps precise enough."""
    last = matches[-1]
    previous = next((m for m in reversed(matches) if m.step < last.step), None)
    if previous is None:
        return None
    stamps = _stamp(last.line.message), _stamp(previous.line.message)
    if stamps[0] is None or stamps[1] is None:
        return None
    interval = stamps[0][0] - stamps[1][0]
    precise = stamps[0][1] and stamps[1][1]
    if interval <= 0 or (not precise and interval < MIN_STAMPED_INTERVAL):
        return None
    return interval / (last.step - previous.step)


def custom_pattern(step_regex: str) -> StepPattern:
    """A user's pattern: a regex with a named group ``step`` (and maybe ``total``); ValueError if not."""
    if (why := step_regex_problem(step_regex)) is not None:
        raise ValueError(why)
    return StepPattern("--step-regex", "", re.compile(step_regex))


def progress(text: str, step_regex: str | None = None) -> Progress | None:
    """The latest training step in ``text``, or None when it shows none or cannot tell.

    ``step_regex`` replaces :data:`DEFAULT_PATTERNS`: a regex with a named group ``step`` (and maybe
    ``total``), applied to the cleaned lines without the non-training guard. ``total`` comes from the
    step's line, or else from the latest earlier line that showed a total at least as large.
    """
    return _read(text, step_regex).latest()


def read_progress(text: str, step_regex: str | None = None) -> tuple[Progress | None, str | None]:
    """:func:`progress`, and when it is None, why, if a line showed a count that is no step of the run:
    a count inside an epoch past the first, a bar that may have closed, a bar counting validation too."""
    reading = _read(text, step_regex)
    found = reading.latest()
    return found, None if found is not None else reading.unknown()


def step_points(text: str, step_regex: str | None = None) -> list[StepPoint]:
    """Every training step ``text`` shows, in order, read as :func:`progress` reads the latest one (the
    same patterns, ``step_regex`` the same way): what raysub report draws a run's steps and throughput
    from."""
    return _read(text, step_regex).points()


def _read(text: str, step_regex: str | None) -> _Reading:
    patterns = (custom_pattern(step_regex),) if step_regex is not None else DEFAULT_PATTERNS
    reading = _Reading(patterns, guarded=step_regex is None)
    for line in lines(text):
        reading.read(line)
    return reading
