"""raysub.health.progress on lines in the formats trainers print (tests/fixtures/logs/ holds longer
samples, hand-written in those formats)."""

from pathlib import Path

import pytest

from raysub import health
from raysub.health.progress import DEFAULT_PATTERNS, Progress, StepPattern, progress, rate
from raysub.health.text import clean

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ESC = "\x1b"


@pytest.mark.parametrize("pattern", DEFAULT_PATTERNS, ids=lambda p: p.framework)
def test_each_default_patterns_example_is_read_by_that_pattern(pattern: StepPattern) -> None:
    found = progress(pattern.example)
    assert found is not None
    assert pattern.regex.search(clean(1, pattern.example).message)
    assert str(found.step) in pattern.example


@pytest.mark.parametrize(
    ("line", "step", "total", "rate_"),
    [
        ("step:12 - global_seqlen/mean:9371.000 - timing_s/step:40.000", 12, None, 0.025),
        ("========================= Step 12/100 =========================", 12, 100, None),
        ("Epoch 1/3 Step 12/100 Train step 12/300 done.", 12, 300, None),
        (" [2025-01-20 10:11:12] iteration      120/    5000 | consumed samples:        15360 |"
         " elapsed time per iteration (ms): 1250.0 | learning rate: 2.999E-04 |", 120, 5000, 0.8),
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
        ("Training Progress:  12%|█▏        | 12/100 [08:02<58:57, 40.00s/it]", 12, 100, 0.025),
        ("Train step of epoch 0:  12%|█▏        | 120/1000 [02:00<14:40,  2.00it/s, lr=2]", 120, 1000, 2.0),
        ("Episode [1/1]:  12%|█▏        | 12/100 [10:00<1:13:20, 50.00s/it]", 12, 100, 0.02),
        ("Training Batches Processed:  12%|█▏        | 12/100 [06:00<44:00, 30.00s/it]", 12, 100, 1 / 30),
        ("Epoch 0:  12%|█▏        | 120/1000 [00:10<01:20, 11.00it/s, v_num=0, loss=1.2]", 120, 1000, 11.0),
        (" 12%|█▏        | 120/1000 [01:23<10:00,  1.45it/s]", 120, 1000, 1.45),
        ("  0%|          | 0/1000 [00:00<?, ?it/s]", 0, 1000, None),
        ("Step 12/100 | loss 1.234", 12, 100, None),
    ],
)  # fmt: skip
def test_one_line_per_format(line: str, step: int, total: int | None, rate_: float | None) -> None:
    found = progress(line)
    assert found is not None
    assert (found.step, found.total) == (step, total)
    assert found.rate == (None if rate_ is None else pytest.approx(rate_))
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
    assert progress(text) == Progress(500, 1000, 1.39, " 50%|█████     | 500/1000 [06:00<06:00,  1.39it/s]")


def test_carriage_return_debris_the_last_segment_counts() -> None:
    text = "Epoch 0:   1%|          | 10/1000 [00:01<01:39, 10.00it/s]"
    text += "\rEpoch 0:   2%|▏         | 20/1000 [00:02<01:38, 10.00it/s]\r\n"
    found = progress(text)
    assert found is not None
    assert (found.step, found.rate) == (20, 10.0)
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
    ("line", "steps_per_second"),
    [
        ("[00:10<01:20, 11.00it/s]", 11.0),
        ("[00:41<1:08:01, 40.00s/it]", 0.025),
        ("elapsed time per iteration (ms): 500.0 |", 2.0),
        ("step:3 - timing_s/step:4.0", 0.25),
        ("[00:00<?, ?it/s]", None),
        ("elapsed time per iteration (ms): 0.0 |", None),
        ("nothing", None),
    ],
)
def test_rates(line: str, steps_per_second: float | None) -> None:
    assert rate(line) == (None if steps_per_second is None else pytest.approx(steps_per_second))


def test_the_package_re_exports_the_parsers() -> None:
    assert health.progress("step:1 - a:1") == progress("step:1 - a:1")
    assert health.Progress is Progress
