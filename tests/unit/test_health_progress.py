"""raysub.health.progress on lines in the formats trainers print (tests/fixtures/logs/ holds longer
samples, hand-written in those formats)."""

import re
from pathlib import Path

import pytest

from raysub import health
from raysub.health.progress import (
    _DETACHED_SECONDS,
    _DETACHED_THROUGHPUTS,
    _DETACHED_WORDS,
    DEFAULT_PATTERNS,
    Progress,
    StepPattern,
    Throughput,
    progress,
    read_progress,
    seconds_per_step,
    step_points,
)
from raysub.health.text import clean

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ESC = "\x1b"


@pytest.mark.parametrize("pattern", DEFAULT_PATTERNS, ids=lambda p: p.framework)
def test_each_default_patterns_example_is_read_by_that_pattern(pattern: StepPattern) -> None:
    # Keras names its epoch on a line of its own, before the epoch's bar.
    found = progress(("Epoch 1/3\n" if pattern.epochs == "keras" else "") + pattern.example)
    assert found is not None
    assert pattern.regex.search(clean(1, pattern.example).message)
    assert str(found.step) in pattern.example


@pytest.mark.parametrize(
    ("line", "step", "total", "seconds"),
    [
        ("step:12 - global_seqlen/mean:9371.000 - timing_s/step:40.000", 12, None, 40.0),
        ("========================= Step 12/100 =========================", 12, 100, None),
        ("Epoch 1/3 Step 12/100 Train step 12/300 done.", 12, 300, None),
        (" [2025-01-20 10:11:12] iteration      120/    5000 | consumed samples:        15360 |"
         " elapsed time per iteration (ms): 1250.0 | learning rate: 2.999E-04 |", 120, 5000, 1.25),
        ("[2025-01-20 10:11:12,167] [INFO] [logging.py:128:log_dist] [Rank 0] step=120, skipped=0,"
         " lr=[2.9e-05], mom=[(0.9, 0.999)]", 120, None, None),
        ("[titan] 2025-01-20 10:11:12,345 - root - INFO - step: 120  loss:  3.2514  memory: 61.20GiB", 120,
         None, None),
        ("Training finished iteration 12 at 2025-01-20 10:11:12. Total running time: 5min", 12, None, None),
        ("│ training_iteration                   12 │", 12, None, None),
        ('{"step": 12, "loss": 1.234}', 12, None, None),
        ('{"global_step": 40, "train/loss": 1.1}', 40, None, None),
        ('{"training_iteration": 7, "loss": 0.5, "time_total_s": 33.1}', 7, None, None),
        ("{'train/global_step': 9, 'loss': 1.2}", 9, None, None),
        ("Training Progress:  12%|█▏        | 12/100 [08:02<58:57, 40.00s/it]", 12, 100, 40.0),
        ("Train step of epoch 0:  12%|█▏        | 120/1000 [02:00<14:40,  2.00it/s, lr=2]", 120, 1000, 0.5),
        ("Episode [1/1]:  12%|█▏        | 12/100 [10:00<1:13:20, 50.00s/it]", 12, 100, 50.0),
        ("Training Batches Processed:  12%|█▏        | 12/100 [06:00<44:00, 30.00s/it]", 12, 100, 30.0),
        ("Epoch 0:  12%|█▏        | 120/1000 [00:10<01:20, 11.00it/s, v_num=0, loss=1.2]", 120, 1000, 1 / 11),
        (" 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]", 120, 1000, 1 / 1.45),
        ("  0%|          | 0/1000 [00:00<?, ?it/s]", 0, 1000, None),
        ("Step 12/100 | loss 1.234", 12, 100, None),
    ],
)  # fmt: skip
def test_one_line_per_format(line: str, step: int, total: int | None, seconds: float | None) -> None:
    found = progress(line)
    assert found is not None
    assert (found.step, found.total) == (step, total)
    assert found.seconds_per_step == (None if seconds is None else pytest.approx(seconds))
    assert found.line == line.rstrip()


@pytest.mark.parametrize(
    ("name", "step", "total"),
    [
        ("verl_ppo.log", 3, 100),  # the step line's total comes from the bar before it
        ("nemo_rl_grpo.log", 8, 20),
        ("openrlhf_ppo.log", 3, 100),  # not the Train epoch bars of the update inside a step
        ("openrlhf_sft.log", 120, 1000),
        ("skyrl.log", 12, 100),
        ("areal.log", 12, 300),
        ("megatron.log", 120, 5000),
        ("hf_trainer.log", 510, 1000),
        ("lightning.log", 120, 1000),
        ("deepspeed.log", 120, None),
        ("torchtitan.log", 120, None),
        ("ray_train.log", 12, None),
    ],
)
def test_recorded_format_logs(name: str, step: int, total: int | None) -> None:
    found = progress((LOGS / name).read_text())
    assert found is not None
    assert (found.step, found.total) == (step, total)


@pytest.mark.parametrize(
    "text",
    [
        "Validation DataLoader 0:  50%|█████     | 50/100 [00:01<00:01, 40.00it/s]",
        "Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00,  9.50it/s]",
        "Testing DataLoader 0:  30%|███       | 30/100 [00:01<00:02, 30.00it/s]",
        "Evaluation:  40%|████      | 8/20 [00:04<00:06,  2.00it/s, eval gpt_loss=1.44]",
        "Generating train split: 100%|██████████| 7473/7473 [00:00<00:00, 91234.50 examples/s]",
        "Processed prompts: 100%|██████████| 1024/1024 [01:02<00:00, 16.40it/s, est. speed input: 2510.12]",
        "Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.20it/s]",
        "rollout step 12/100: generating",
        "Train epoch [1/1]: 100%|██████████| 16/16 [00:40<00:00,  2.50s/it, pg=0.01]",
        "Train epoch:  33%|███▎      | 1/3 [10:00<20:00, 600.00s/it]",
        " 100%|██████████| 9912422/9912422 [00:00<00:00, 31415926.53B/s]",
        "step time: 1.2s",
        "  • Total step time: 61.42s",
        "elapsed: 12:00, step_time: 7.41",
        "Saving checkpoint to: /ckpt/global_step_100",
        "saving checkpoint at iteration     120 to /ckpt/megatron in torch_dist format",
        " validation loss at iteration 120 | lm loss value: 2.331022E+00 |",
        "[titan] 2025-01-20 10:11:14,000 - root - INFO - validate step: 120  loss:  3.3000",
        "Saving checkpoint at step 12/300",
        "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 2.5e-05, 'epoch': 0.5}",
        "{'eval_loss': 1.1002, 'eval_runtime': 12.5, 'epoch': 0.5}",
        "",
    ],
)
def test_traps_are_not_training_progress(text: str) -> None:
    assert progress(text) is None


def test_evaluation_bars_without_description_are_told_by_their_total() -> None:
    text = "\r 50%|█████     | 500/1000 [06:00<06:00,  1.39it/s]\n"
    text += "\r 40%|████      | 50/125 [00:05<00:07, 10.00it/s]\n"
    bar = " 50%|█████     | 500/1000 [06:00<06:00,  1.39it/s]"
    found = progress(text)
    assert found == Progress(500, 1000, found.seconds_per_step if found else None, None, bar)
    assert found is not None and found.seconds_per_step == pytest.approx(1 / 1.39)


def test_carriage_return_debris_the_last_segment_counts() -> None:
    text = "Epoch 0:   1%|          | 10/1000 [00:01<01:39, 10.00it/s]"
    text += "\rEpoch 0:   2%|▏         | 20/1000 [00:02<01:38, 10.00it/s]\r\n"
    found = progress(text)
    assert found is not None
    assert (found.step, found.seconds_per_step) == (20, 0.1)
    assert "\r" not in found.line


def test_ansi_and_ray_and_rank_prefixes_are_read_through() -> None:
    text = "\n".join(
        [
            f"{ESC}[36m(TaskRunner pid=2817){ESC}[0m step:7 - actor/pg_loss:0.1",
            f"{ESC}[36m(RayTrainWorker pid=1, ip=10.0.0.4){ESC}[0m [rank0]:{ESC}[31mstep:  8  {ESC}[32mloss:",
            "(pid=4410) [rank3]: 0: step:9 - actor/pg_loss:0.1 [repeated 7x across cluster]",
            " 3: [default0]:Training Progress:  10%|█         | 10/100 [00:10<01:30,  1.00it/s]",
        ]
    )
    steps = [progress(line) for line in text.split("\n")]
    assert [s.step if s else None for s in steps] == [7, 8, 9, 10]
    assert steps[0] is not None
    assert steps[0].line == "(TaskRunner pid=2817) step:7 - actor/pg_loss:0.1"
    found = progress(text)
    assert found is not None
    assert found.step == 10


def test_the_latest_line_wins_even_when_a_restart_goes_back() -> None:
    text = "step:50 - a:1\nstep:51 - a:1\nResuming from /ckpt/global_step_40\nstep:41 - a:1\n"
    found = progress(text)
    assert found is not None
    assert found.step == 41


def test_a_borrowed_total_must_not_be_smaller_than_the_step() -> None:
    text = "Step 3/10 | warmup\nstep:12 - a:1\n"
    found = progress(text)
    assert found is not None
    assert (found.step, found.total) == (12, None)


def test_a_step_regex_replaces_the_defaults() -> None:
    text = "step:12 - a:1\n[trainer] it 30 of 90 loss 1.2\nValidation it 31 of 90\n"
    found = progress(text, r"\bit (?P<step>\d+) of (?P<total>\d+)")
    assert found is not None
    assert (found.step, found.total) == (31, 90)  # the user's pattern has no guard
    assert progress("step:12 - a:1", r"iter=(?P<step>\d+)") is None
    found = progress("(pid=1) iter=5 loss=1", r"^iter=(?P<step>\d+)")
    assert found is not None
    assert (found.step, found.total) == (5, None)


@pytest.mark.parametrize("regex", [r"it (\d+)", r"it (?P<total>\d+)", "(unclosed"])
def test_a_step_regex_needs_a_step_group(regex: str) -> None:
    with pytest.raises(ValueError, match=r"step|regular expression"):
        progress("it 3", regex)


@pytest.mark.parametrize(
    ("line", "seconds"),
    [
        ("[00:10<01:20, 11.00it/s]", 1 / 11),
        ("[00:41<1:08:01, 40.00s/it]", 40.0),
        ("Step 12/100 | loss 1.234 | 4.1 s/it", 4.1),  # a space before the unit (issue 27)
        ("Step 12/100 | loss 1.234 | 2.5 it/s", 0.4),
        ("elapsed time per iteration (ms): 500.0 |", 0.5),
        ("step:3 - timing_s/step:4.0", 4.0),
        ("[00:00<?, ?it/s]", None),
        ("elapsed time per iteration (ms): 0.0 |", None),
        ("nothing", None),
    ],
)
def test_seconds_per_step(line: str, seconds: float | None) -> None:
    assert seconds_per_step(line) == (None if seconds is None else pytest.approx(seconds))


def test_the_package_re_exports_the_parsers() -> None:
    assert health.progress("step:1 - a:1") == progress("step:1 - a:1")
    assert health.Progress is Progress


def bar(description: str, step: int, total: int, postfix: str = "") -> str:
    return f"{description}:  50%|█████     | {step}/{total} [00:10<00:10,  2.00s/it{postfix}]"


def test_a_lightning_1x_epoch_bar_moving_while_validating_is_no_training_step() -> None:
    validating = "Validating:  50%|█████     | 5/10 [00:05<00:05,  1.00it/s]"
    lines = [bar("Epoch 2", 120, 130), validating, bar("Epoch 2", 121, 130), bar("Epoch 2", 122, 130)]
    assert progress("\n".join(lines)) is None
    lines = [
        bar("Epoch 2", 120, 130, ", global_step=263.0"),
        validating,
        bar("Epoch 2", 121, 130, ", global_step=263.0"),
    ]
    found = progress("\n".join(lines))
    assert found is not None
    assert (found.step, found.total, found.seconds_per_step) == (263, None, None)
    # Lightning 2.x: validation finishes before the epoch bar moves on.
    finished = "Validation DataLoader 0: 100%|██████████| 10/10 [00:05<00:00,  2.00it/s]"
    found = progress("\n".join([bar("Epoch 0", 120, 130), finished, bar("Epoch 0", 121, 130)]))
    assert found is not None and (found.step, found.total) == (121, 130)


@pytest.mark.parametrize(
    ("text", "step"),
    [
        # Lightning numbers epochs from 0, and its bar counts the batches of one epoch.
        (bar("Epoch 0", 120, 130), 120),
        (f"{bar('Epoch 0', 130, 130)}\n{bar('Epoch 1', 12, 130)}", None),  # not 130, nor 12
        (bar("Epoch 1", 12, 130, ", global_step=142.0"), 142),  # the bar's own global step is the run's
        # "k/E" counts from 1 (verl's SFT bar, Keras, AReaL).
        (bar("Epoch 1/3", 12, 35), 12),
        (bar("Epoch 2/3", 12, 35), None),
        ("Epoch 1/3\n35/35 [==============================] - 9s 257ms/step - loss: 0.5", 35),
        ("Epoch 7/144\n10000/10000 [==============================] - 2301s 230ms/step - loss: 2.6", None),
        ("10000/10000 [==============================] - 2301s 230ms/step - loss: 2.6", None),  # no epoch
        # MetricLogger's "Epoch: [e]" counts from 0, mmcv's "Epoch [e][" from 1.
        ("Epoch: [0]  [120/1251]  eta: 0:19:01  lr: 0.000201  time: 1.0508", 120),
        ("Epoch: [1]  [120/1251]  eta: 0:19:01  lr: 0.000201  time: 1.0508", None),
        ("Epoch: [0/100]  [120/1251]  eta: 0:19:01  lr: 0.000201  time: 1.0508", 120),  # DINO
        ("Epoch [1][1750/14659]\tlr: 0.01000, eta: 1 day, 12:59:21, time: 0.769", 1750),
        ("Epoch [2][1750/14659]\tlr: 0.01000, eta: 1 day, 12:59:21, time: 0.769", None),
        # a bare bar (gluonts) whose postfix names the epoch
        ("100%|██████████| 250/250 [00:16<00:00, 15.24it/s, epoch=2/250, avg_epoch_loss=20.7]", None),
        # another counter on the line names the run's step: verl's SFT trainer
        (f"{bar('Epoch 3/3', 34, 35)}step:105 - train/loss:0.06\n{bar('Epoch 3/3', 34, 35)}", 105),
        ("epoch 2/5 step 3/12 loss 0.5", None),
    ],
)
def test_a_count_inside_an_epoch_is_the_runs_step_only_in_the_first_epoch(
    text: str, step: int | None
) -> None:
    found = progress(text)
    assert (found and found.step) == step
    if step is None:
        assert "epoch" in (unknown(text) or ""), unknown(text)


def unknown(text: str) -> str | None:
    """Why ``text`` gives no step though it shows a count."""
    return read_progress(text)[1]


def test_verls_bar_one_short_of_its_total_may_be_closed_at_the_end() -> None:
    text = "\n".join([bar("Training Progress", 58, 60), bar("Training Progress", 59, 60)])
    assert progress(text) is None  # not 59, and not the stale 58
    assert "verl closes its bar" in (unknown(text) or "")
    assert progress(bar("Training Progress", 58, 60)) is not None


def test_a_bars_total_that_a_banner_contradicts_is_unknown() -> None:
    banner = "\\        /    Total batch size = 8 | Total steps = 580"
    found = progress(f"{banner}\n  0%|          | 0/2900 [00:00<?, ?it/s]")
    assert found is not None and (found.step, found.total) == (0, None)
    found = progress("  Total optimization steps = 2900\n  0%|          | 0/2900 [00:00<?, ?it/s]")
    assert found is not None and found.total == 2900


def test_two_writers_of_one_bar_give_no_answer_until_it_passes_the_furthest_count() -> None:
    lines = [bar("Epoch 0", 5, 18), "Epoch 0:  33%|███▎      | 6/18 [00:23<00:47,  3", bar("Epoch 0", 1, 18)]
    assert progress("\n".join(lines)) is None
    found = progress("\n".join([*lines, bar("Epoch 0", 7, 18)]))
    assert found is not None and found.step == 7
    # A finished bar that starts over is the next epoch, not a second writer.
    found = progress("\n".join([bar("Epoch", 18, 18), bar("Epoch", 1, 18)]))
    assert found is not None and found.step == 1


def test_a_bar_cut_inside_its_numbers_never_counts() -> None:
    found = progress("\n".join([bar("Epoch 0", 5, 180), "Epoch 0:  33%|███▎      | 6/18"]))
    assert found is not None and (found.step, found.total) == (5, 180)


def test_carriage_returns_spelled_by_a_forwarder() -> None:
    text = "#015  0%|          | 0/250 [00:00<?, ?it/s]#015100%|██████████| 250/250 [00:16<00:00, 15.24it/s]"
    found = progress(text)
    assert found is not None and (found.step, found.total) == (250, 250)


@pytest.mark.parametrize(
    ("line", "value", "unit"),
    [
        ("step:  4  loss:  7.62585  tps: 10,050  tflops: 314.69", 10050.0, "tokens/s/device"),
        ("step   20/74 | loss 3.2 | 36.74 ms | 9.1% bf16 MFU | 111854 tok/s", 111854.0, "tokens/s"),
        (" iteration 73/ 100 | elapsed time per iteration (ms): 5829.9 |"
         " throughput per GPU (TFLOP/s/GPU): 224.0 |", 224.0, "TFLOP/s/device"),
        (" samples/sec: 7.799 | iteration       34/   10000 | elapsed time per iteration (ms): 4103.1 |",
         7.799, "samples/s"),
        ("completed step: 3, seconds: 10.344, TFLOP/s/device: 346.932, Tokens/s/device: 19006.461",
         19006.461, "tokens/s/device"),
    ],
)  # fmt: skip
def test_throughput_as_the_log_states_it(line: str, value: float, unit: str) -> None:
    found = progress(line)
    assert found is not None and found.throughput == Throughput(value, unit)


@pytest.mark.parametrize(
    "pattern", [p for p, _ in (*_DETACHED_SECONDS, *_DETACHED_THROUGHPUTS)], ids=lambda p: p.pattern
)
def test_each_pattern_for_lines_of_their_own_holds_a_word_such_lines_are_looked_for_by(
    pattern: re.Pattern[str],
) -> None:
    # The lines between two steps are tried against these patterns only when they hold one of the words.
    assert any(word in pattern.pattern for word in _DETACHED_WORDS)


def test_a_time_and_a_throughput_on_lines_of_their_own_between_many_other_lines() -> None:
    # Lines of tests/fixtures/corpus/progress/hf-trainer-tqdm-redrawn-around-step-dicts.log, the cleared
    # bar many times over: what the step before and after a step line states is read all the same.
    cleared = " " * 51
    before = "{'train_step_runtime': 0.6715, 'train_step_samples_per_second': 53.608, 'epoch': 0.99}"
    after = "{'train_step_runtime': 0.6717, 'train_step_samples_per_second': 53.592, 'epoch': 0.99}"
    first = " 99%|█████████▊| 2089/2120 [26:03<00:21,  1.45it/s]"
    second = " 99%|█████████▊| 2090/2120 [26:04<00:20,  1.43it/s]"
    text = "\n".join([first, *[cleared] * 40, before, *[cleared] * 40, second, *[cleared] * 40, after])
    found = progress(text)
    assert found is not None and (found.step, found.throughput) == (2090, Throughput(53.592, "samples/s"))
    found = progress(text.removesuffix(after))
    assert found is not None and (found.step, found.throughput) == (2090, Throughput(53.608, "samples/s"))
    points = [(point.step, point.throughput) for point in step_points(text)]
    assert points == [(2089, Throughput(53.608, "samples/s")), (2090, Throughput(53.592, "samples/s"))]


def test_seconds_per_step_from_timestamps_only_when_precise_enough() -> None:
    line = "[titan] 2026-02-24 19:46:{:s} - root - INFO - step: {:d}  loss:  7.6"
    found = progress("\n".join([line.format("17,508", 4), line.format("19,145", 5)]))
    assert found is not None and found.seconds_per_step == pytest.approx(1.637)
    automodel = "2026-08-10 16:00:{:02d} | INFO | root | step {:d} | epoch 0 | loss 0.7"
    found = progress("\n".join([automodel.format(54, 13), automodel.format(56, 14)]))
    assert found is not None and found.seconds_per_step is None  # whole seconds, 2 s apart
