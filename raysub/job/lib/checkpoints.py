"""The newest complete checkpoint under a directory, in the layouts trainers write.

The head asks for it at each driver start through raysub/job/programs/checkpoints.py; raysub health and watch
import it. Shipped to the nodes with the rest of raysub.protocol: the standard library only, Python 3.9.

Layouts, by the name of a checkpoint's directory:

============  ====================================  =================================================
layout        directory names                       written by
============  ====================================  =================================================
step          ``step_N``, ``step-N``                NeMo-RL (``step_N``), torchtitan (``step-N``)
global_step   ``global_step_N``, ``global_stepN``   verl, SkyRL; DeepSpeed and OpenRLHF (no ``_``)
hf            ``checkpoint-N``                      HF Trainer (and TRL)
megatron      ``iter_NNNNNNN``, ``release``         Megatron-LM, Megatron Bridge
ray_train     ``checkpoint_<timestamp>``            Ray Train v2 (``checkpoint_2025-01-20_10-11-12.123456``)
ray_train_v1  ``checkpoint_NNNNNN``                 Ray Train and Tune before Train v2
============  ====================================  =================================================

Checkpoints are looked for in DIR and in the directories below it, down to MAX_DEPTH levels (not inside
a checkpoint, not in hidden directories, not through symbolic links). A checkpoint still being written
is never taken; only an explicit sign makes one complete, never its age:

- With ``--marker NAME``, a checkpoint is complete when it contains NAME; nothing else counts.
- Otherwise, a pointer in the directory that holds the checkpoints names the newest complete one, and
  newer ones are being written:

  - ``latest_checkpointed_iteration.txt`` (Megatron: ``iter_N``; verl: ``global_step_N``), which both
    write after every rank saved (verl skips it with async saving);
  - ``latest_ckpt_global_step.txt`` (SkyRL, after the save);
  - ``latest``, a file naming the checkpoint's directory (DeepSpeed writes its tag there after all
    ranks saved, e.g. ``global_step120``) or a symbolic link to it;
  - ``checkpoint_manager_snapshot.json`` (Ray Train v2), which the controller rewrites each time it
    registers a reported checkpoint, after the workers uploaded it: its ``latest_checkpoint_result``
    names the newest (``checkpoint_dir_name``, relative to the run directory, or an absolute path when
    ``out_of_band``), ``checkpoint_results`` the ones kept. A checkpoint directory it does not name was
    not registered: still being uploaded, or left by a failed attempt.

- Without a pointer, the layout's own sign, a file each trainer writes last or only when done:

  - step: ``training_info.json`` (NeMo-RL writes it into ``tmp_step_N`` and renames the directory to
    ``step_N`` once complete) or ``.metadata`` (torch.distributed.checkpoint, torchtitan's sign);
  - global_step: ``data.pt`` (verl's and SkyRL's dataloader state, saved after the model);
  - hf: ``trainer_state.json`` (saved after the model, optimizer, scheduler and RNG states);
  - megatron: ``.metadata`` (the torch_dist format's last file);
  - ray_train_v1: the run's ``result.json`` has a result whose ``checkpoint_dir_name`` names it (Ray
    adds it to the reported metrics after persisting the checkpoint);
  - ray_train: none (the snapshot is its sign).

Among the complete checkpoints of one directory, the newest has the largest step (Ray Train v2: the
latest timestamp); when a checkpoint was modified never counts. When complete checkpoints lie in more
than one directory under DIR (runs or trials side by side), which is the run's newest cannot be told:
latest_checkpoint raises AmbiguousCheckpoints naming those directories, and the program exits 2 with it.
Pass the run's own directory as DIR instead, or a marker only its checkpoints hold. Directories whose
newest is the same checkpoint (a ``latest`` symbolic link into another one) count once.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_DEPTH = 3  # DIR/run/trial/checkpoint_000001: Ray Train v1 keeps checkpoints two levels down
MAX_DIRECTORIES = 10000  # directories looked into at most, for a DIR over a large tree
MAX_LISTED = 5  # directories an AmbiguousCheckpoints message names before "and N more"

# Layout name and the pattern of its directories' names (group 1: the step).
LAYOUTS = (
    ("step", re.compile(r"step[_-](\d+)")),
    ("global_step", re.compile(r"global_step_?(\d+)")),
    ("hf", re.compile(r"checkpoint-(\d+)")),
    ("megatron", re.compile(r"iter_(\d+)|release")),
    ("ray_train", re.compile(r"checkpoint_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(?:\.\d+)?")),
    ("ray_train_v1", re.compile(r"checkpoint_(\d+)")),
)
# The files whose presence makes a checkpoint of a layout complete when no pointer names one.
SIGNS = {
    "step": ("training_info.json", ".metadata"),
    "global_step": ("data.pt",),
    "hf": ("trainer_state.json",),
    "megatron": (".metadata",),
    "ray_train": (),
    "ray_train_v1": (),
}
TRACKERS = ("latest_checkpointed_iteration.txt", "latest_ckpt_global_step.txt")
LATEST = "latest"
RAY_SNAPSHOT = "checkpoint_manager_snapshot.json"
RAY_RESULTS = "result.json"


def _relative(path: Path, directory: Path) -> str:
    try:
        return str(path.relative_to(directory))
    except ValueError:
        return str(path)


class AmbiguousCheckpoints(ValueError):
    """Complete checkpoints in more than one directory under ``directory``: none is the newest."""

    def __init__(self, directory: Path, holders: Sequence[Path]) -> None:
        self.directory = directory
        self.holders = list(holders)
        names = [_relative(holder, directory) for holder in self.holders]
        listed = ", ".join(names[:MAX_LISTED])
        if len(names) > MAX_LISTED:
            listed += f" and {len(names) - MAX_LISTED} more"
        super().__init__(
            f"{directory}: complete checkpoints in {len(names)} directories ({listed}), so which run's is"
            " the newest cannot be told; pass the run's own directory instead (or --checkpoint-marker)"
        )

    def __reduce__(self) -> tuple[type[AmbiguousCheckpoints], tuple[Path, list[Path]]]:
        return (type(self), (self.directory, self.holders))


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's directory, its step when its name has one, and its layout (see LAYOUTS)."""

    path: Path
    step: int | None
    layout: str

    @property
    def order(self) -> tuple[int, str]:
        """Newer checkpoints of one directory sort after older ones."""
        return (-1 if self.step is None else self.step, self.path.name)


def layout_of(path: Path) -> Checkpoint | None:
    """``path`` as a checkpoint when its name follows a layout, else None."""
    for layout, pattern in LAYOUTS:
        match = pattern.fullmatch(path.name)
        if match:
            step = next((int(group) for group in match.groups() if group is not None), None)
            return Checkpoint(path, step, layout)
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _subdirectories(directory: Path) -> list[Path]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and e.name[0] != ".")


def _tracked(holder: Path, candidates: Sequence[Checkpoint]) -> Iterator[Checkpoint]:
    """The checkpoints the step trackers in ``holder`` name."""
    for name in TRACKERS:
        value = _read(holder / name).strip()
        if value == "release" or value.isdigit():
            step = None if value == "release" else int(value)
            yield from (c for c in candidates if c.step == step and c.layout in ("megatron", "global_step"))


def _latest_pointer(holder: Path) -> Iterator[Checkpoint]:
    """The checkpoint a ``latest`` file or symbolic link in ``holder`` names."""
    latest = holder / LATEST
    if latest.is_symlink():
        name = str(latest.readlink()).rstrip("/")
    elif latest.is_file():
        name = _read(latest).strip()
    else:
        return
    target = holder / name
    if name and target.is_dir():
        yield layout_of(target) or Checkpoint(target, None, LATEST)


def _ray_snapshot(holder: Path) -> Iterator[Checkpoint]:
    """The newest checkpoint Ray Train v2's snapshot in ``holder`` registered."""
    try:
        snapshot: Any = json.loads(_read(holder / RAY_SNAPSHOT))
    except ValueError:
        return
    if not isinstance(snapshot, dict):
        return
    kept = snapshot.get("checkpoint_results")
    results = [snapshot.get("latest_checkpoint_result"), *reversed(kept if isinstance(kept, list) else [])]
    for result in results:
        name = result.get("checkpoint_dir_name") if isinstance(result, dict) else None
        path = holder / name if isinstance(name, str) and name else None
        if path is not None and path.is_dir():
            yield layout_of(path) or Checkpoint(path, None, "ray_train")
            return


def _pointed(holder: Path, candidates: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints the pointers in ``holder`` name (empty when it has none)."""
    return [*_tracked(holder, candidates), *_latest_pointer(holder), *_ray_snapshot(holder)]


def _ray_v1_reported(holder: Path) -> set[str]:
    """The checkpoint directories Ray Train v1's result.json in ``holder`` names."""
    names = set()
    for line in _read(holder / RAY_RESULTS).splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and isinstance(result.get("checkpoint_dir_name"), str):
            names.add(result["checkpoint_dir_name"])
    return names


def _signed(holder: Path, candidates: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints in ``holder`` that carry their layout's own sign of completeness."""
    reported = _ray_v1_reported(holder) if any(c.layout == "ray_train_v1" for c in candidates) else set()
    return [
        c
        for c in candidates
        if any((c.path / sign).exists() for sign in SIGNS[c.layout])
        or (c.layout == "ray_train_v1" and c.path.name in reported)
    ]


def complete_in(holder: Path, candidates: Sequence[Checkpoint], marker: str | None) -> list[Checkpoint]:
    """The complete checkpoints among ``candidates``, all in ``holder`` (see the module's doc)."""
    if marker is not None:
        return [c for c in candidates if (c.path / marker).exists()]
    return _pointed(holder, candidates) or _signed(holder, candidates)


def holders(directory: Path) -> Iterator[tuple[Path, list[Checkpoint]]]:
    """Each directory under ``directory`` (itself included) with the checkpoints it holds."""
    queue = [(directory, 0)]
    visited = 0
    while queue and visited < MAX_DIRECTORIES:
        holder, depth = queue.pop(0)
        visited += 1
        candidates = []
        for sub in _subdirectories(holder):
            checkpoint = layout_of(sub)
            if checkpoint is not None:
                candidates.append(checkpoint)
            elif depth + 1 < MAX_DEPTH:
                queue.append((sub, depth + 1))
        yield holder, candidates


def latest_checkpoint(directory: Path, marker: str | None = None) -> Checkpoint | None:
    """The newest complete checkpoint under ``directory``, or None (see the module's doc).

    Raises AmbiguousCheckpoints when more than one directory under it holds complete checkpoints.
    """
    newest: dict[Path, tuple[Path, Checkpoint]] = {}  # by the checkpoint's real path: the holder, it
    for holder, candidates in holders(directory):
        complete = complete_in(holder, candidates, marker)
        if complete:
            checkpoint = max(complete, key=lambda c: c.order)
            newest.setdefault(checkpoint.path.resolve(), (holder, checkpoint))
    if len(newest) > 1:
        raise AmbiguousCheckpoints(directory, [holder for holder, _ in newest.values()])
    return next((checkpoint for _, checkpoint in newest.values()), None)
