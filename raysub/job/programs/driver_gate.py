"""The early driver's gate (docs/protocol.md#the-early-driver).

The head starts a Python driver as soon as its own Ray is up, while the workers still join, with this
file first on the driver's PYTHONPATH under the name ``sitecustomize``. It wraps ``ray.init`` when the
driver imports ray: the driver's imports and its connection to Ray overlap the workers' start, but
``ray.init`` returns only once the head has published that the cluster is whole, so the driver's own
code never sees a partial cluster. Should the job end first, ``ray.init`` raises SystemExit instead.

Only the driver's own process is held: the gate takes its variables out of the environment (and
restores PYTHONPATH) before the driver's code runs, so the processes it starts never load it. A
``sitecustomize`` the environment already had still runs, after this one. Standard library only, and no
import of raysub: the driver's Python is the user's.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

# Set by the head for the early driver only; the names are mirrored in raysub/protocol/__init__.py.
ENV_OPEN = "_RAYSUB_DRIVER_GATE"  # the file whose existence opens the gate (LOG_DIR/DRIVER_STARTED)
ENV_ENDED = "_RAYSUB_DRIVER_GATE_ENDED"  # the file that says the job is ending (LOG_DIR/ENDED)
ENV_PYTHONPATH = "_RAYSUB_DRIVER_PYTHONPATH"  # the driver's PYTHONPATH without the gate's directory
# How often the gate looks for its file, in seconds (JobSpec.timing.gate_look_s): its latency is part of
# every bring-up, and a stat on the head is cheap.
ENV_LOOK = "_RAYSUB_DRIVER_GATE_LOOK"


@dataclass(frozen=True)
class Gate:
    """What holds the driver's ray.init: the file that opens it, the file that ends the job, how often
    to look."""

    opened: str
    ended: str
    look: float


def wait_open(gate: Gate) -> None:
    """Returns once the gate's file exists; raises SystemExit if ENDED appears first."""
    while not Path(gate.opened).exists():
        if Path(gate.ended).exists():
            raise SystemExit(f"raysub: the job ended before the cluster was whole ({gate.ended})")
        time.sleep(gate.look)


def gated(init: Callable[..., Any], gate: Gate) -> Callable[..., Any]:
    """``ray.init`` that connects at once and returns once the gate is open."""

    @functools.wraps(init)
    def init_when_whole(*args: Any, **kwargs: Any) -> Any:
        context = init(*args, **kwargs)
        wait_open(gate)
        return context

    return init_when_whole


class GatedLoader:
    """The loader of the ``ray`` package, which replaces ``ray.init`` once the package has run; every
    other attribute is the real loader's."""

    def __init__(self, inner: Any, gate: Gate) -> None:
        self.inner, self.gate = inner, gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        module.init = gated(module.init, self.gate)  # type: ignore[attr-defined]


class RayFinder:
    """A meta path finder that finds ``ray`` as the others would, with a GatedLoader; once."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "ray":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec: ModuleSpec | None = find(name, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = GatedLoader(spec.loader, self.gate)  # type: ignore[assignment]
                return spec
        return None


def restore_pythonpath() -> None:
    """Puts back the driver's PYTHONPATH, so that the processes it starts do not load the gate."""
    original = os.environ.pop(ENV_PYTHONPATH, "")
    if original:
        os.environ["PYTHONPATH"] = original
    else:
        os.environ.pop("PYTHONPATH", None)


def chain_sitecustomize() -> None:
    """Runs the ``sitecustomize`` this file hides, if the environment has one."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != here]
    this = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")
    except ImportError as error:
        if error.name != "sitecustomize":
            raise
    finally:
        # The import system reads sitecustomize back from sys.modules when this file has run.
        sys.modules.setdefault("sitecustomize", this)  # type: ignore[arg-type]


def install() -> None:
    """What loading this file as ``sitecustomize`` does."""
    opened, ended = os.environ.pop(ENV_OPEN, ""), os.environ.pop(ENV_ENDED, "")
    look = os.environ.pop(ENV_LOOK, "")
    if opened:
        restore_pythonpath()
        sys.meta_path.insert(0, RayFinder(Gate(opened, ended, float(look))))
    chain_sitecustomize()


if __name__ == "sitecustomize":
    install()
