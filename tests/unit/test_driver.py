"""raysub.driver, for the user's driver: declare_finished creates the file the head named in $RAYSUB_FINISHED,
and does nothing outside a raysub job. Importing it brings in neither Ray nor raysub's command line."""

import ast
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from raysub import driver, protocol


def test_declare_finished_creates_the_file_the_head_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = tmp_path / protocol.DRIVER_FINISHED
    monkeypatch.setenv(protocol.FINISHED_ENV, str(finished))
    assert driver.declare_finished()
    assert finished.exists()
    assert stat.S_IMODE(finished.stat().st_mode) == protocol.PRIVATE_FILE_MODE
    assert driver.declare_finished()  # again: no harm


def test_outside_a_raysub_job_it_returns_false(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protocol.FINISHED_ENV, raising=False)
    assert not driver.declare_finished()
    assert not driver.declare_finished({protocol.FINISHED_ENV: ""})


def test_a_file_that_cannot_be_made_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        driver.declare_finished({protocol.FINISHED_ENV: str(tmp_path / "gone" / protocol.DRIVER_FINISHED)})


def test_it_imports_only_the_standard_library_and_raysubs_protocol() -> None:
    tree = ast.parse(Path(driver.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    outside = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names}
    assert outside == {"raysub.protocol"}
    probe = "import sys, raysub.driver; print(sorted(m for m in ('ray', 'click') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
