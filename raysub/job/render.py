"""Turn a JobSpec into the self-contained sbatch script, from the Jinja templates in raysub/job/templates/."""

import ast
import io
import re
import shlex
import tokenize
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import jinja2

from raysub import __version__, protocol, slurm
from raysub.job import manifest
from raysub.job.view import LARGE_SCALE, JobView
from raysub.protocol import preflight_log
from raysub.spec import (
    CHECKPOINT_PLACEHOLDER,
    MAX_SOCKET_PATH,
    PORT_BLOCK_SIZE,
    RAY_SOCKET_SUFFIX,
    SANDBOX_PORT_AT,
    JobSpec,
)
from raysub.timing import Timing

# The batch script and the scripts it writes into LOG_DIR, in the order they are written.
EMBEDDED = (
    (protocol.SHARED_BASH, "lib.sh.j2"),
    (protocol.NODE_BASH, "node.sh.j2"),
    (protocol.HEAD_SCRIPT, "head.sh.j2"),
    (protocol.WORKER_SCRIPT, "worker.sh.j2"),
    (protocol.DRIVER_SCRIPT, "driver_command.sh.j2"),
    (protocol.SANDBOX_SCRIPT, "sandbox.sh.j2"),
    (protocol.ATTACH_SCRIPT, "attach.sh.j2"),
)


# The line after which the batch script holds only its payload: what it writes into LOG_DIR. A person
# reading the job reads down to it; tests/golden keeps the part above it whole.
PAYLOAD_LINE = f"# {' PAYLOAD '.center(100, '=')}"


TEMPLATES = Path(__file__).resolve().parent / "templates"


def shell_quote(value: object) -> str:
    """One shell word that expands to exactly ``str(value)``."""
    return shlex.quote(str(value))


# Values sbatch reads from an '#SBATCH' line as they are; anything else goes in double quotes.
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def sbatch_quote(value: object) -> str:
    """``value`` as one argument of an '#SBATCH' line. sbatch's own parser (not bash) reads these lines:
    it takes a backslash as an escape everywhere, quoted or not, and ends the line at a newline, which
    JobSpec.check refuses."""
    text = str(value)
    if _SBATCH_PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def resume_quote(value: object) -> str:
    """Like shell_quote, but each {checkpoint} becomes the path in RAYSUB_RESUME_FROM when the word is used
    (empty when there is none)."""
    parts = str(value).split(CHECKPOINT_PLACEHOLDER)
    if len(parts) == 1:
        return shell_quote(value)
    resume = f'"${{{protocol.RESUME_FROM}:-}}"'
    return resume.join(shell_quote(part) if part else "" for part in parts)


def sbatch_arg(arg: str) -> str:
    """A passthrough '--option=value' with its value quoted for the '#SBATCH' line."""
    option, sep, value = arg.partition("=")
    return f"{option}{sep}{sbatch_quote(value)}" if sep else option


@cache
def environment() -> jinja2.Environment:
    # The output is bash, not HTML: escaping is shell quoting, done by the shq filter.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        # Bash has ${#var}; Jinja's default comment marker {# would swallow it.
        comment_start_string="<#",
        comment_end_string="#>",
    )
    env.filters["shq"] = shell_quote
    env.filters["sbq"] = sbatch_quote
    env.filters["resume_shq"] = resume_quote
    env.filters["sbatch_arg"] = sbatch_arg
    return env


@dataclass(frozen=True)
class EmbeddedScript:
    """A file the batch script writes into LOG_DIR: rendered from a template, or (``library``) one of
    raysub's own modules, shipped as it is."""

    name: str
    text: str
    delimiter: str
    library: bool = False


def node_programs(spec: JobSpec) -> list[str]:
    """The node programs (raysub/job/programs/<name>.py) this job's scripts run: its manifest rows."""
    return [program.name for program in manifest.selected(JobView(spec))]


@cache
def _import_names(source: str) -> tuple[str, ...]:
    """The module names a module of this source imports (at the top or inside a function). Kept by
    source, not by file: parsing is most of a render's time, and a changed file is parsed again."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            # "from raysub.job.lib import gcs" imports raysub.protocol and, as a module, its gcs.
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return tuple(names)


def _imported(module: Path, package: Path) -> set[Path]:
    """The raysub modules that ``module`` imports, as files."""
    found = set()
    for name in _import_names(module.read_text()):
        if name.split(".")[0] != package.name:
            continue
        path = package.parent.joinpath(*name.split("."))
        found |= {p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()}
    return found


PROGRAMS = Path(__file__).resolve().parent / "programs"  # raysub/job/programs: the node programs


def node_library(spec: JobSpec | None = None) -> list[tuple[str, Path]]:
    """What the batch script ships under LOG_DIR for the node programs: each program ``spec`` uses (every
    one without a spec), the modules they import and their packages' __init__ (raysub/job/__init__.py
    says what they may import); the early driver's gate goes apart, as sitecustomize. Each with its path
    under LOG_DIR."""
    package = Path(__file__).resolve().parents[1]
    node = PROGRAMS
    programs = node_programs(spec) if spec else list(manifest.ROWS)
    gate = node / "driver_gate.py"
    # Ray's autoscaler imports this one (--autoscale); it ships apart, and what it imports as usual.
    entry = package / "job" / "lib" / "autoscaler_entry.py"
    todo = [node / f"{name}.py" for name in programs if name != gate.stem]
    todo += _imported(entry, package) if "autoscale" in programs else []
    modules: set[Path] = set()
    while todo:
        module = todo.pop()
        if module in modules:
            continue
        modules.add(module)
        parents = [p / "__init__.py" for p in module.parents if p.is_relative_to(package) and p != module]
        todo += [*_imported(module, package), *(p for p in parents if p.is_file())]
    shipped = [(f"{protocol.NODE_PYTHON_DIR}/raysub/{m.relative_to(package)}", m) for m in sorted(modules)]
    if gate.stem in programs:
        shipped.append((f"{protocol.NODE_PYTHON_DIR}/{protocol.DRIVER_GATE_DIR}/sitecustomize.py", gate))
    if "autoscale" in programs:
        where = f"{protocol.NODE_PYTHON_DIR}/{protocol.AUTOSCALER_DIR}/{protocol.AUTOSCALER_MODULE}.py"
        shipped.append((where, entry))
    return shipped


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _docstring_lines(tree: ast.Module, module_doc: bool = True) -> set[int]:
    """The lines of each function's and class's docstring (and, unless ``module_doc``, the module's) that
    hold nothing else, but where it is the whole body (a body must hold a statement)."""
    lines: set[int] = set()
    if not module_doc and ast.get_docstring(tree, clean=False) is not None:
        lines |= _alone(tree.body)  # a module may be empty
    for node in ast.walk(tree):
        if isinstance(node, _DEFINITIONS) and len(node.body) > 1 and ast.get_docstring(node, clean=False):
            lines |= _alone(node.body)
    return lines


def _alone(body: list[ast.stmt]) -> set[int]:
    """The lines of the first statement of ``body`` when no other statement shares them."""
    first, end = body[0], body[0].end_lineno or body[0].lineno
    return set(range(first.lineno, end + 1)) if len(body) == 1 or body[1].lineno > end else set()


# Tokens that do not make a line code: a line with only these is blank or a comment.
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def code_lines(source: str, module_doc: bool = True) -> str:
    """``source`` without the lines that hold only a comment or nothing (a line inside a string stays) and
    without the docstrings of functions and classes: the same program; its module docstring kept when
    ``module_doc`` (a program's --help)."""
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    code -= _docstring_lines(ast.parse(source), module_doc)
    return "".join(line for number, line in enumerate(source.splitlines(keepends=True), 1) if number in code)


def shipped_text(module: Path) -> str:
    """A raysub module as a job ships it: its code_lines, after a line naming the source that has the rest. A
    job script is read for its bash; comments, blank lines and docstrings were over a third of its Python."""
    where = module.relative_to(Path(__file__).resolve().parents[2])
    return (
        f"# {where} of raysub {__version__}, less its comments, blank lines and docstrings.\n"
        + code_lines(module.read_text(), module_doc=is_program(module))
    )


def is_program(module: Path) -> bool:
    """Whether ``module`` is a node program, whose docstring is its --help (other modules' are not used)."""
    return module.parent == PROGRAMS


GROW_TIMING = Timing()  # a grow job's batch script is no job's spec: it takes the default timings
GROW_RANK_BASE = 1001  # a grow job's nodes' topology ranks start here (the job's own stay below)


def grow_script(log_dir: str | None, **sbatch: Any) -> str:
    """A grow job's batch script (templates/grow.sub.j2): raysub grow's for the job whose LOG_DIR is
    ``log_dir``, with its #SBATCH options (name, nodes, output, partition, time, sbatch_args); or, with no
    LOG_DIR, the one of Ray's autoscaler (--autoscale), whose node provider gives all of them."""
    values = {"partition": None, "time": None, "sbatch_args": (), **sbatch}
    template = environment().get_template("grow.sub.j2")
    return template.render(
        files=protocol.template_names(),
        log_dir=log_dir,
        leave_s=GROW_TIMING.grow_leave_s,
        warn_s=GROW_TIMING.grow_warn_s,
        drain_s=GROW_TIMING.grow_drain_s,
        rank_base=GROW_RANK_BASE,
        **values,
    )


def heredoc_delimiter(name: str, text: str) -> str:
    """A here-document delimiter that no line of ``text`` equals (user values can hold newlines)."""
    base = "RAYSUB_" + re.sub(r"\W", "_", name).upper()
    lines = set(text.splitlines())
    delimiter, n = base, 1
    while delimiter in lines:
        delimiter, n = f"{base}_{n}", n + 1
    return delimiter


def render(spec: JobSpec) -> str:
    """The sbatch script for ``spec``, after checking it (raises SpecError)."""
    spec.check()
    env = environment()
    view = JobView(spec)
    context = {
        "spec": view,
        "files": protocol.template_names(),
        "version": __version__,
        "socket_suffix": RAY_SOCKET_SUFFIX,
        "max_socket_path": MAX_SOCKET_PATH,
        "block_size": PORT_BLOCK_SIZE,
        "sandbox_port_at": SANDBOX_PORT_AT,
        "large": LARGE_SCALE,
        # The open files Ray's head wants (kuberay's default, which a 2000-node cluster outgrew), and
        # what "unlimited" stands for: Linux's default fs.nr_open, above which no limit can be set.
        "open_files_wanted": 65536,
        "open_files_unlimited": 1048576,
        "attach_options": [*slurm.ATTACH_OPTIONS],
        "preflight_failed": preflight_log.GATE_FAILED,
        "attach_shell": [*slurm.ATTACH_SHELL],
        "worker_log_pattern": protocol.worker_log_pattern(spec.workers),
        "sandbox_log_pattern": protocol.sandbox_log_pattern(),
        "private_file_mode": f"{protocol.PRIVATE_FILE_MODE:04o}",
        "private_dir_mode": f"{protocol.PRIVATE_DIR_MODE:04o}",
        "log_files": protocol.batch_log_files(spec.workers > 0, spec.sandbox is not None),
        "worker_log_format": protocol.worker_log_format(spec.workers),
        "payload_line": PAYLOAD_LINE,
        "program_call": partial(manifest.program_call, view),
        "program_args": partial(manifest.program_args, view),
    }
    scripts = []
    for name, template in EMBEDDED:
        if name == protocol.WORKER_SCRIPT and not spec.workers:
            continue
        if name == protocol.SANDBOX_SCRIPT and spec.sandbox is None:
            continue
        if name == protocol.DRIVER_SCRIPT and spec.interactive:
            continue
        if name == protocol.ATTACH_SCRIPT and not spec.interactive:
            continue
        text = env.get_template(template).render(context)
        scripts.append(EmbeddedScript(name, text, heredoc_delimiter(name, text)))
    if spec.autoscale is not None:
        text = grow_script(None)
        scripts.append(
            EmbeddedScript(protocol.GROW_SCRIPT, text, heredoc_delimiter(protocol.GROW_SCRIPT, text))
        )
    for name, module in node_library(spec):
        text = shipped_text(module)
        scripts.append(EmbeddedScript(name, text, heredoc_delimiter(name, text), library=True))
    # The shared bash is written above the PAYLOAD line: the supervisor uses it too.
    shared, scripts = scripts[0], scripts[1:]
    directories = sorted({str(Path(script.name).parent) for script in scripts} - {"."})
    return env.get_template("ray.sub.j2").render(
        context, shared=shared, scripts=scripts, directories=directories
    )
