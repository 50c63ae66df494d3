"""Skip a test whose prerequisite is missing, except under CI, where a skip would hide a broken set-up."""

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def need(condition: bool, reason: str) -> None:
    """Skip with ``reason`` unless ``condition``; under CI=true fail instead, since CI must run everything."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true, yet this test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def tool(name: str, *candidates: Path) -> str:
    """The path of an executable: the first existing candidate, else ``name`` on PATH; skips when absent."""
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    found = shutil.which(name)
    need(found is not None, f"{name} is not installed (scripts/setup installs it)")
    assert found is not None
    return found
