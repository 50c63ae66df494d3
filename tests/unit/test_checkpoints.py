"""raysub.job.lib.checkpoints: each layout's newest complete checkpoint, the one still being written skipped,
and the program the nodes run (python -m raysub.job.programs.checkpoints)."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raysub.job.lib.checkpoints import AmbiguousCheckpoints, Checkpoint, latest_checkpoint
from raysub.job.programs.checkpoints import main

REPO = Path(__file__).parents[2]


def tree(root: Path, *files: str) -> Path:
    """``root`` with ``files`` (paths relative to it; one ending in / is a directory) created."""
    for name in files:
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x")
    return root


def found(directory: Path, marker: str | None = None) -> tuple[str, int | None, str] | None:
    checkpoint = latest_checkpoint(directory, marker)
    if checkpoint is None:
        return None
    return str(checkpoint.path.relative_to(directory)), checkpoint.step, checkpoint.layout


def test_nemo_rl_step_n_renamed_when_complete(tmp_path: Path) -> None:
    tree(tmp_path, "step_10/training_info.json", "step_20/training_info.json", "step_20/policy/weights/x")
    tree(tmp_path, "tmp_step_30/training_info.json", "tmp_step_30/policy/weights/x")  # being written
    assert found(tmp_path) == ("step_20", 20, "step")


def test_torchtitan_step_n_complete_with_dcp_metadata(tmp_path: Path) -> None:
    tree(
        tmp_path,
        "step-900/.metadata",
        "step-1000/.metadata",
        "step-1000/__0_0.distcp",
        "step-1100/__0_0.distcp",
    )
    assert found(tmp_path) == ("step-1000", 1000, "step")  # numeric order; step-1100 has no .metadata yet


def test_verl_tracker_names_the_newest(tmp_path: Path) -> None:
    tree(tmp_path, *(f"global_step_{n}/{name}" for n in (10, 20) for name in ("actor/x", "data.pt")))
    tree(tmp_path, "global_step_30/actor/x", "global_step_30/data.pt")  # saved, the tracker not yet rewritten
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("20")
    assert found(tmp_path) == ("global_step_20", 20, "global_step")


def test_verl_without_tracker_async_save_uses_the_dataloader_state(tmp_path: Path) -> None:
    tree(tmp_path, "global_step_10/actor/x", "global_step_10/data.pt", "global_step_20/actor/x")
    assert found(tmp_path) == ("global_step_10", 10, "global_step")


def test_skyrl_tracker(tmp_path: Path) -> None:
    tree(tmp_path, *(f"global_step_{n}/{name}" for n in (4, 8) for name in ("policy/x", "data.pt")))
    (tmp_path / "latest_ckpt_global_step.txt").write_text("4\n")
    assert found(tmp_path) == ("global_step_4", 4, "global_step")


def test_deepspeed_latest_file_names_the_tag(tmp_path: Path) -> None:
    tree(tmp_path, "global_step100/mp_rank_00_model_states.pt", "global_step200/mp_rank_00_model_states.pt")
    (tmp_path / "latest").write_text("global_step100")
    assert found(tmp_path) == ("global_step100", 100, "global_step")
    (tmp_path / "latest").write_text("global_step300")  # names nothing there: no pointer, no sign
    assert found(tmp_path) is None


def test_a_latest_symlink(tmp_path: Path) -> None:
    tree(tmp_path, "step_10/training_info.json", "step_20/training_info.json", "custom_name/weights")
    (tmp_path / "latest").symlink_to("step_10")
    assert found(tmp_path) == ("step_10", 10, "step")
    (tmp_path / "latest").unlink()
    (tmp_path / "latest").symlink_to(tmp_path / "custom_name", target_is_directory=True)
    assert found(tmp_path) == ("custom_name", None, "latest")


def test_hf_trainer_state_is_written_last(tmp_path: Path) -> None:
    tree(tmp_path, "checkpoint-500/trainer_state.json", "checkpoint-900/trainer_state.json")
    tree(tmp_path, "checkpoint-1000/model.safetensors", "checkpoint-1000/optimizer.pt")  # being written
    tree(tmp_path, "runs/Jan20_10-11-12/events.out.tfevents.1")
    assert found(tmp_path) == ("checkpoint-900", 900, "hf")
    tree(tmp_path, "checkpoint-1000/trainer_state.json")
    assert found(tmp_path) == ("checkpoint-1000", 1000, "hf")


def test_megatron_tracker(tmp_path: Path) -> None:
    tree(tmp_path, "iter_0000100/.metadata", "iter_0000200/.metadata", "iter_0000300/common.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    assert found(tmp_path) == ("iter_0000100", 100, "megatron")
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()
    assert found(tmp_path) == ("iter_0000200", 200, "megatron")  # torch_dist's last file, without a tracker
    tree(tmp_path, "release/mp_rank_00/model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release")
    assert found(tmp_path) == ("release", None, "megatron")


def ray_snapshot(latest: str | None, kept: list[str], out_of_band: bool = False) -> str:
    """A checkpoint_manager_snapshot.json as Ray Train v2 writes it (_CheckpointManagerState)."""

    def result(name: str) -> dict[str, object]:
        return {
            "version": 1,
            "metrics": {"loss": 0.5, "epoch": 1},
            "checkpoint_dir_name": name,
            "checkpoint_filesystem_type": "local" if out_of_band else None,
            "out_of_band": out_of_band,
        }

    return json.dumps(
        {
            "ray_version": "2.52.0",
            "checkpoint_results": [result(name) for name in kept],
            "checkpoint_report_indices": list(range(len(kept))),
            "latest_checkpoint_result": result(latest) if latest else None,
            "pending_training_results": [],
            "pending_validation_specs": [],
            "current_report_index": len(kept),
            "validated_checkpoint_dir_names": [],
        }
    )


RAY_TIMES = ("2025-01-20_10-11-12.123456", "2025-01-20_10-21-12.654321", "2025-01-20_10-31-12.000001")


def test_ray_train_v2_snapshot_names_the_newest_registered(tmp_path: Path) -> None:
    run = tree(
        tmp_path / "my_run", *(f"checkpoint_{t}/model.pt" for t in RAY_TIMES), ".validate_storage_marker"
    )
    first, second, third = (f"checkpoint_{t}" for t in RAY_TIMES)
    (run / "checkpoint_manager_snapshot.json").write_text(ray_snapshot(second, [first, second]))
    assert found(tmp_path) == (f"my_run/{second}", None, "ray_train")  # the third is still uploading
    (run / "checkpoint_manager_snapshot.json").write_text(ray_snapshot(third, [first, second, third]))
    assert found(tmp_path) == (f"my_run/{third}", None, "ray_train")


def test_ray_train_v2_without_a_snapshot_has_no_complete_checkpoint(tmp_path: Path) -> None:
    tree(tmp_path, *(f"checkpoint_{t}/model.pt" for t in RAY_TIMES))
    assert found(tmp_path) is None
    (tmp_path / "checkpoint_manager_snapshot.json").write_text("{not json")
    assert found(tmp_path) is None


def test_ray_train_v2_older_schema_custom_names_and_out_of_band(tmp_path: Path) -> None:
    tree(tmp_path, "epoch_3/model.pt", "elsewhere/epoch_4/model.pt")
    snapshot = {"version": 0, "checkpoint_results": [], "latest_checkpoint_result": None}
    snapshot["checkpoint_results"] = [{"version": 0, "checkpoint_dir_name": "epoch_3", "metrics": {}}]
    (tmp_path / "checkpoint_manager_snapshot.json").write_text(json.dumps(snapshot))
    assert found(tmp_path) == ("epoch_3", None, "ray_train")  # latest_checkpoint_result None: the kept list
    out_of_band = str(tmp_path / "elsewhere" / "epoch_4")
    (tmp_path / "checkpoint_manager_snapshot.json").write_text(ray_snapshot(out_of_band, [out_of_band], True))
    assert found(tmp_path) == ("elsewhere/epoch_4", None, "ray_train")


def test_ray_train_v1_checkpoints_named_in_result_json(tmp_path: Path) -> None:
    trial = tmp_path / "TorchTrainer_2025-01-20_10-00-00" / "TorchTrainer_0bc04_00000_0_2025-01-20_10-00-01"
    tree(trial, "checkpoint_000000/model.pt", "checkpoint_000001/model.pt", "checkpoint_000002/model.pt")
    results = [
        {"loss": 0.9, "checkpoint_dir_name": None},
        {"loss": 0.7, "checkpoint_dir_name": "checkpoint_000000"},
    ]
    results.append({"loss": 0.6, "checkpoint_dir_name": "checkpoint_000001", "training_iteration": 2})
    (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in results) + '{"loss": 0.5, "chec')
    assert found(tmp_path) == (f"{trial.parent.name}/{trial.name}/checkpoint_000001", 1, "ray_train_v1")


def test_a_marker_replaces_every_other_sign(tmp_path: Path) -> None:
    tree(tmp_path, "global_step_10/DONE", "global_step_20/DONE", "global_step_30/data.pt", "checkpoint-40/x")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("30")
    assert found(tmp_path, "DONE") == ("global_step_20", 20, "global_step")
    assert found(tmp_path) == ("global_step_30", 30, "global_step")
    assert found(tmp_path, "NOPE") is None


def test_within_a_directory_the_step_decides_not_the_time_modified(tmp_path: Path) -> None:
    tree(tmp_path, "checkpoint-900/trainer_state.json", "checkpoint-1000/trainer_state.json")
    os.utime(tmp_path / "checkpoint-1000", (1_600_000_000, 1_600_000_000))
    os.utime(tmp_path / "checkpoint-900", (1_700_000_000, 1_700_000_000))
    assert found(tmp_path) == ("checkpoint-1000", 1000, "hf")


def test_runs_side_by_side_are_ambiguous(tmp_path: Path) -> None:
    tree(tmp_path, "sft/checkpoint-900/trainer_state.json", "rl/global_step_5/data.pt", "rl/global_step_6/x")
    os.utime(tmp_path / "sft" / "checkpoint-900", (1_700_000_000, 1_700_000_000))  # the time changes nothing
    with pytest.raises(AmbiguousCheckpoints) as raised:
        latest_checkpoint(tmp_path)
    assert raised.value.holders == [tmp_path / "rl", tmp_path / "sft"]
    message = str(raised.value)
    assert message.startswith(f"{tmp_path}: complete checkpoints in 2 directories (rl, sft)")
    assert "pass the run's own directory" in message and "--checkpoint-marker" in message
    assert "\n" not in message
    assert found(tmp_path / "rl") == ("global_step_5", 5, "global_step")  # the run's own directory
    assert found(tmp_path, "DONE") is None  # a marker only one run's checkpoints hold
    tree(tmp_path, "sft/checkpoint-900/DONE")
    assert found(tmp_path, "DONE") == ("sft/checkpoint-900", 900, "hf")
    tree(tmp_path, "rl/global_step_6/data.pt")  # still ambiguous, whichever is newer
    os.utime(tmp_path / "rl" / "global_step_6", (1_800_000_000, 1_800_000_000))
    with pytest.raises(AmbiguousCheckpoints):
        latest_checkpoint(tmp_path)


def test_checkpoints_in_a_directory_and_below_it_are_ambiguous(tmp_path: Path) -> None:
    tree(tmp_path, "step_10/training_info.json", "old/step_99/training_info.json", "being_written/step_5/x")
    with pytest.raises(AmbiguousCheckpoints, match=r"in 2 directories \(\., old\)"):
        latest_checkpoint(tmp_path)


def test_trials_side_by_side_are_ambiguous_and_the_list_is_cut_short(tmp_path: Path) -> None:
    for trial in range(7):
        tree(tmp_path / "experiment" / f"trial_{trial}", "checkpoint_000000/model.pt")
        result = json.dumps({"checkpoint_dir_name": "checkpoint_000000"})
        (tmp_path / "experiment" / f"trial_{trial}" / "result.json").write_text(result + "\n")
    with pytest.raises(AmbiguousCheckpoints) as raised:
        latest_checkpoint(tmp_path)
    assert len(raised.value.holders) == 7
    listed = ", ".join(f"experiment/trial_{trial}" for trial in range(5))
    assert f"complete checkpoints in 7 directories ({listed} and 2 more)" in str(raised.value)


def test_a_checkpoint_two_directories_name_counts_once(tmp_path: Path) -> None:
    tree(tmp_path, "run/step_10/training_info.json", "run/step_20/x")
    (tmp_path / "latest").symlink_to(tmp_path / "run" / "step_10", target_is_directory=True)
    assert found(tmp_path) == ("run/step_10", 10, "step")


def test_the_ambiguity_error_copies(tmp_path: Path) -> None:
    error = AmbiguousCheckpoints(tmp_path, [tmp_path / "a", tmp_path / "b"])
    copied = copy.copy(error)  # as pickle does: by its directory and holders, not its message
    assert (str(copied), copied.holders) == (str(error), error.holders)


def test_the_search_depth_hidden_directories_and_no_checkpoints(tmp_path: Path) -> None:
    tree(tmp_path, "a/b/c/d/checkpoint-5/trainer_state.json", ".cache/checkpoint-6/trainer_state.json")
    assert found(tmp_path) is None
    assert found(tmp_path / "a") is None  # four levels down
    assert found(tmp_path / "a" / "b") == ("c/d/checkpoint-5", 5, "hf")  # three
    assert found(tmp_path / "a" / "b" / "c" / "d" / "checkpoint-5") is None  # a checkpoint holds none
    assert found(tmp_path / "empty") is None


def test_main_prints_the_newest_checkpoints_absolute_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree(tmp_path, "out/checkpoint-5/trainer_state.json", "out/checkpoint-6/x", "out/checkpoint-6/DONE")
    monkeypatch.chdir(tmp_path)
    assert main(["out"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'checkpoint-5'}\n"
    assert main(["out", "--marker", "DONE"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'checkpoint-6'}\n"
    assert main(["out", "--marker=NOPE"]) == 0
    assert capsys.readouterr() == ("", "")


def test_main_on_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"raysub: {tmp_path / 'nope'}: no such directory\n"
    tree(tmp_path, "file")
    assert main([str(tmp_path / "file")]) == 2


def test_main_on_ambiguous_checkpoints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree(tmp_path, "a/step_1/training_info.json", "b/step_2/training_info.json")
    assert main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"raysub: {tmp_path}: complete checkpoints in 2 directories (a, b)")
    assert err.count("\n") == 1 and err.endswith("\n")


def test_the_program_runs_as_a_module(tmp_path: Path) -> None:
    tree(tmp_path, "iter_0000010/.metadata", "latest_checkpointed_iteration.txt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "raysub.job.programs.checkpoints", *args]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)

    done = run(".")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{tmp_path / 'iter_0000010'}\n", "")
    done = run("missing")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1
    tree(tmp_path, "other_run/iter_0000020/.metadata")
    done = run(".")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("raysub: .: complete checkpoints in 2 directories (., other_run)")
    assert done.stderr.count("\n") == 1


def test_checkpoint_order() -> None:
    older, newer = Checkpoint(Path("step_9"), 9, "step"), Checkpoint(Path("step_10"), 10, "step")
    assert older.order < newer.order
    ray = [Checkpoint(Path(f"checkpoint_{t}"), None, "ray_train") for t in RAY_TIMES]
    assert sorted(ray, key=lambda c: c.order) == ray
