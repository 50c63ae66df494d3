"""The adapters of raysub.trainer_hooks for Hugging Face's Trainer and PyTorch Lightning, each run for real
(a tiny model on the CPU, a few optimizer steps) in a process that has a job's LOG_DIR in its environment:
the report in LOG_DIR is the run's global step and total, from the adapter named. Each adapter imports its
own stack only."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raysub import protocol
from raysub.protocol import trainer_progress

# Four optimizer steps of two micro-batches each (gradient accumulation): the step is 4, never 8.
HUGGING_FACE = textwrap.dedent(
    """
    import sys, torch
    from transformers import Trainer, TrainingArguments
    from raysub.trainer_hooks.hugging_face import RaysubCallback

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x, y):
            return {"loss": torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)}

    data = [{"x": torch.randn(4), "y": torch.randn(())} for _ in range(64)]
    args = TrainingArguments(
        output_dir=sys.argv[1], max_steps=4, per_device_train_batch_size=2, gradient_accumulation_steps=2,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
    )
    Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[RaysubCallback()]).train()
    """
)
LIGHTNING = textwrap.dedent(
    """
    import torch
    import lightning.pytorch as L
    from torch.utils.data import DataLoader, TensorDataset
    from raysub.trainer_hooks.lightning import RaysubCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64)), batch_size=2)
    trainer = L.Trainer(
        max_steps=4, accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[RaysubCallback()],
    )
    trainer.fit(Tiny(), data)
    """
)


def train(tmp_path: Path, program: str) -> trainer_progress.Report:
    log_dir = tmp_path / "7-logs"
    log_dir.mkdir(mode=0o750)
    env = {"PATH": "/usr/bin:/bin", protocol.ENV_LOG_DIR: str(log_dir), "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-c", program, str(tmp_path / "out")]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = trainer_progress.read(log_dir)
    assert report is not None
    assert trainer_progress.history(log_dir)[-1].step == report.step  # the last step kept for the report
    return report


@pytest.mark.parametrize(("program", "source"), [(HUGGING_FACE, "hugging-face"), (LIGHTNING, "lightning")])
def test_a_stacks_callback_reports_its_global_step(tmp_path: Path, program: str, source: str) -> None:
    report = train(tmp_path, program)
    assert (report.step, report.total, report.source) == (4, 4, source)
    assert report.seconds_per_step is not None and report.seconds_per_step > 0


@pytest.mark.parametrize(
    ("adapter", "stack", "others"),
    [
        ("hugging_face", "transformers", ("lightning", "pytorch_lightning", "ray")),
        ("lightning", "lightning.pytorch", ("transformers", "ray")),
        ("ray_train", "ray.train", ("transformers", "lightning", "pytorch_lightning")),
    ],
)
def test_each_adapter_imports_no_other_stack(adapter: str, stack: str, others: tuple[str, ...]) -> None:
    # What the adapter imports beyond its stack (which may import what it likes: torchmetrics, under
    # Lightning, imports transformers when it is installed).
    program = (
        f"import sys, {stack}\nbefore = set(sys.modules)\nimport raysub.trainer_hooks.{adapter}\n"
        f"print(sorted({{name.split('.')[0] for name in set(sys.modules) - before}} & set({others!r})))"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
