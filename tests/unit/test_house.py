"""The house drawn from raysub's imports (docs/architecture.md): arrows point down, never up.

Floors, top to bottom: the command line (raysub.cli); the submit host's library (every other module outside
node/ and protocol/); the node programs (raysub.job.programs), which run on the nodes and which the submit
host only ships, never imports; and, below both, raysub.protocol: LOG_DIR's names and formats and the readers
of Ray's own, which imports nothing of raysub above it. Each LOG_DIR format is read and written in its one
module of raysub.protocol; elsewhere a format's file name is only ever shown (in a message or a help text),
and only raysub.protocol parses JSON. A default is written once.
"""

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import raysub
from raysub.cli import cli
from raysub.cli import options as cli_options

PACKAGE = Path(raysub.__file__).parent
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in sorted(PACKAGE.rglob("*.py"))
}
# The files with a format, by the name of their constant, each read and written in its module of
# raysub.protocol; raysub.protocol itself names every file's path (LogDir).
FORMATS = {
    "PREFLIGHT": {"raysub.protocol.preflight_log"},
    "METRICS": {"raysub.protocol.metrics_log"},
    "SMOKE": {m for m in MODULES if m.startswith("raysub.protocol.smoke")},
    "TIMELINE": set(),
    "NODE_MAP": set(),
    "HEALTH_PROGRESS": set(),
    "JOB_INDEX": set(),
}
# JSON that is not a LOG_DIR format: what raysub watch keeps about its own submissions, in its state
# directory.
# The checkpoint finder reads a trainer's own metadata next to its checkpoints.
# JSON that is no LOG_DIR format, each parsed in one place: watch's state, trainers' checkpoint records,
# Ray's --resources (the topology rules) and trainers' JSON-lines metrics (health's structured sources).
OWN_JSON = {
    "raysub.watch_rules",
    "raysub.job.lib.checkpoints",
    "raysub.job.lib.topology",
    "raysub.health.structured",
}


def floor(module: str) -> int:
    """0 for raysub.protocol, 1 for what the node programs share (raysub.job.lib), 2 for the node programs
    and the library, 3 for the command line."""
    if module == "raysub" or module.startswith("raysub.protocol"):
        return 0
    if module == "raysub.job" or module.startswith("raysub.job.lib"):
        return 1
    if module in ("raysub.cli", "raysub.__main__") or module.startswith("raysub.cli."):
        return CLI
    return 2


CLI = 3  # the command line's floor


def imports(module: str) -> Iterator[str]:
    """The raysub modules ``module`` imports, at the top or inside a function, or by importlib."""
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        yield from (name for name in names if name in MODULES and name != module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_points_up(module: str) -> None:
    for imported in imports(module):
        assert floor(imported) <= floor(module), f"{module} imports {imported}, a floor above it"
        if module.startswith("raysub.protocol"):
            assert imported.startswith("raysub.protocol") or imported == "raysub", (
                f"{module} imports {imported}"
            )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("raysub.job.programs")))
def test_nothing_outside_node_imports_a_node_program(module: str) -> None:
    programs = [imported for imported in imports(module) if imported.startswith("raysub.job.programs")]
    assert not programs, f"{module} imports the node program(s) {programs}: ship or run it, never import it"


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith(("raysub.job.programs", "raysub.job.lib")))
)
def test_a_node_program_imports_no_other_only_what_they_share_and_the_protocol(module: str) -> None:
    for imported in imports(module):
        if imported in ("raysub", "raysub.job", "raysub.job.programs", "raysub.job.lib"):
            continue  # the packages' own __init__, which import nothing
        assert imported.startswith(("raysub.job.lib.", "raysub.protocol")), f"{module} imports {imported}"


def shown_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside f-strings: a name there is shown, not opened."""
    return {
        id(inner) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for inner in ast.walk(node)
    }


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_format_is_read_and_written_only_in_its_module(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text())
    shown = shown_only(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FORMATS and id(node) not in shown:
            owners = {"raysub.protocol", *FORMATS[node.attr]}
            assert module in owners, f"{module} uses {node.attr} outside {sorted(owners)}"
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "json"
            and node.attr in ("load", "loads")
        ):
            assert module.startswith("raysub.protocol") or module in OWN_JSON, f"{module} parses JSON"


def literal_defaults() -> Iterator[tuple[str, str, object]]:
    """(module, name, value) of every module-level constant and every dataclass field given a number."""
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        bodies = [tree.body, *(node.body for node in tree.body if isinstance(node, ast.ClassDef))]
        for body in bodies:
            for node in body:
                target, value = None, None
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AnnAssign):
                    target, value = node.target, node.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Constant)
                    and type(value.value) in (int, float)
                ):
                    yield module, target.id, value.value


def test_no_two_modules_define_the_same_default() -> None:
    """The same name given a number in two modules is one default written twice (or two things sharing
    a name): either way, one must go."""
    seen: dict[str, str] = {}
    for module, name, _ in literal_defaults():
        if name.isupper():
            assert seen.setdefault(name, module) == module, f"{name} is defined in {seen[name]} and {module}"


def written_defaults() -> Iterator[tuple[str, int, object]]:
    """(module, line, value) of each number or text written out as an option's default in raysub.cli: the
    ``default=`` of any call (click.option and raysub.cli.options' helpers alike), and the argument a helper
    takes as its parameter ``default`` (``seconds_option("--backoff", 60.0, ...)``). Empty text, the
    absence of a value, is none."""
    helpers = {
        name: list(inspect.signature(helper).parameters).index("default")
        for name, helper in vars(cli_options).items()
        if inspect.isfunction(helper) and "default" in inspect.signature(helper).parameters
    }
    for module, path in MODULES.items():
        if floor(module) != CLI:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            given = [keyword.value for keyword in node.keywords if keyword.arg == "default"]
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in helpers and len(node.args) > helpers[name]:
                given.append(node.args[helpers[name]])
            for value in given:
                if (
                    isinstance(value, ast.Constant)
                    and type(value.value) in (int, float, str)
                    and value.value != ""
                ):
                    yield module, value.lineno, value.value


def option_defaults() -> Iterator[tuple[str, str, object]]:
    """(command, option, default) of every option of every raysub command whose default is a number."""
    group = click.Context(cli)
    for name in cli.list_commands(group):
        command = cli.get_command(group, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and type(param.default) in (int, float):
                yield name, param.opts[0], param.default


def test_the_command_line_writes_no_default_of_its_own() -> None:
    """An option's default is the library's named constant or dataclass field (``Rules.max_excluded``),
    never the value written again in raysub.cli."""
    written = [f"{module}, line {line}: default {value!r}" for module, line, value in written_defaults()]
    assert not written, "take these defaults from the library's names: " + "; ".join(written)


def test_every_options_default_is_a_library_value() -> None:
    """Every number an option defaults to is the value of a named default of the library, and no constant
    of raysub.cli holds it a second time."""
    library = {value for module, _, value in literal_defaults() if floor(module) != CLI}
    mine = {value: f"{module}.{name}" for module, name, value in literal_defaults() if floor(module) == CLI}
    for command, option, default in option_defaults():
        assert default in library, f"raysub {command} {option}: its default {default!r} is no library default"
        assert default not in mine, (
            f"raysub {command} {option}: its default is written again as {mine[default]}"
        )


def test_the_job_specs_defaults_are_not_written_again_in_a_node_program() -> None:
    """A JobSpec default a node program also needs is a named constant both use (e.g. the preflight's
    DEFAULT_MIN_FREE_MIB), not the same number in both."""
    spec = {
        value for module, name, value in literal_defaults() if module == "raysub.spec" and not name.isupper()
    }
    for module, path in MODULES.items():
        if not module.startswith("raysub.job.programs"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "default"
                and isinstance(node.value, ast.Constant)
            ):
                value = node.value.value
                if isinstance(value, (int, float)) and value not in (0, 1):
                    assert value not in spec, (
                        f"{module}: an option's default {value!r} is a JobSpec default too"
                    )


def test_the_imports_draw_no_circle() -> None:
    """No module reaches itself through what it imports (at the top or inside a function)."""
    graph = {module: set(imports(module)) for module in MODULES}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "a circle: " + " -> ".join((*path[path.index(module) :], module))
        if module not in done:
            for imported in sorted(graph[module]):
                visit(imported, (*path, module))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())
