"""The engine's import graph: no import circle runs through the runtime or the Spark integration.

Every ``import`` in the packages counts: those inside functions (a lazy
import still couples two modules) and those under ``if TYPE_CHECKING:`` (a
type-only import is still a dependency a reader must follow, and a circle of
them means two modules cannot be understood, or moved, one without the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("flinklike_spark", "connectors", "checkpointing")


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = _modules(root, packages)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        targets: set[str | None] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    imported = ".".join([*base, node.module] if node.module else base)
                else:
                    imported = node.module or ""
                targets.update(owner(f"{imported}.{alias.name}") for alias in node.names)
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_the_graph_finds_a_planted_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_type_only_and_lazy_imports(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.b import B\n")
    (package / "b.py").write_text("def f():\n    from planted import a\n")
    graph = _import_graph(tmp_path, ("planted",))
    assert graph["planted.a"] == {"planted.b"} and graph["planted.b"] == {"planted.a"}
    assert _cycles(graph) == [["planted.a", "planted.b"]]


def _script_graph(directory: Path) -> dict[str, set[str]]:
    """The imports among the scripts of ``directory`` (run with it on ``sys.path``: ``import sibling``)."""
    scripts = {path.stem: path for path in directory.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in scripts.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets.add(node.module.partition(".")[0])
        graph[name] = {t for t in targets if t in scripts and t != name}
    return graph


def test_no_import_circle_anywhere():
    """Over the whole product (type-only and lazy imports included) and the benchmark scripts."""
    assert _cycles(_import_graph()) == []
    for directory in (ROOT / "benchmarks", ROOT / "benchmarks" / "compare"):
        assert _cycles(_script_graph(directory)) == [], directory


def test_the_script_graph_finds_a_circle_between_siblings(tmp_path):
    (tmp_path / "a.py").write_text("from b import f\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    assert _cycles(_script_graph(tmp_path)) == [["a", "b"]]


def test_the_datastream_api_imports_nothing_of_spark():
    graph = _import_graph()
    api = [m for m in graph if m == "flinklike_spark.datastream" or m.startswith("flinklike_spark.datastream.")]
    assert api, "the datastream package moved: update this test"
    imports = {m: sorted(t for t in graph[m] if t.startswith("flinklike_spark.spark")) for m in api}
    assert all(not spark for spark in imports.values()), imports


def test_the_engine_imports_connectors_only_through_pyflinks_faces():
    """``connectors`` builds on ``flinklike_spark``'s public API, never the reverse: only the modules at
    PyFlink's connector paths (``flinklike_spark.datastream.connectors...``, faces that re-export) import it."""
    graph = _import_graph()
    faces = "flinklike_spark.datastream.connectors"
    engine = [m for m in graph if m.startswith("flinklike_spark") and not (m == faces or m.startswith(faces + "."))]
    inward = {m: sorted(t for t in graph[m] if t.split(".")[0] == "connectors") for m in engine}
    assert {m: t for m, t in inward.items() if t} == {}


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("flinklike_spark/datastream/data_stream.py", 500),
        ("flinklike_spark/datastream/stream_execution_environment.py", 500),
        ("flinklike_spark/_runtime/operators/stream_operator.py", 500),
        ("flinklike_spark/_runtime/jobmaster/jobmaster.py", 500),
        ("flinklike_spark/_runtime/taskexecutor/slot_table.py", 700),
        ("flinklike_spark/_runtime/io/barrier_handler.py", 700),
        ("flinklike_spark/_runtime/operators/window_operator.py", 700),
        ("flinklike_spark/datastream/window/assigners.py", 700),
        ("flinklike_spark/datastream/window/triggers.py", 700),
        ("flinklike_spark/config.py", 700),
    ],
)
def test_modules_split_by_role_stay_within_their_size(path, limit):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= limit, f"{path} has {lines} lines (limit {limit}): split it by role"


def test_no_product_file_exceeds_700_lines():
    """Every module of the product, not a list of names: a new large file fails here too."""
    too_long = {
        str(path.relative_to(ROOT)): n
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 700
    }
    assert too_long == {}, f"split these by role: {too_long}"


def test_the_network_layer_imports_nothing_above_it():
    graph = _import_graph()
    network = [m for m in graph if m.startswith("flinklike_spark._runtime.network.")]
    above = (
        "flinklike_spark._runtime.tasks",
        "flinklike_spark._runtime.io",
        "flinklike_spark._runtime.operators",
        "flinklike_spark._runtime.taskexecutor",
        "flinklike_spark._runtime.jobmaster",
    )
    assert network, "the network package moved: update this test"
    upward = {m: sorted(t for t in graph[m] if t.startswith(above)) for m in network}
    assert all(not targets for targets in upward.values()), upward


TASK_SIDE_PACKAGES = tuple(f"flinklike_spark._runtime.{package}." for package in ("tasks", "io", "operators", "state"))


def test_the_jobmaster_side_of_checkpoints_imports_nothing_of_the_task_side():
    graph = _import_graph()
    jobmaster_side = (
        "flinklike_spark._runtime.gateways",
        "flinklike_spark._runtime.checkpoint_messages",
        "flinklike_spark._runtime.jobmaster.checkpoint_coordinator",
        "flinklike_spark._runtime.jobmaster.checkpoint_stats",
    )

    def task_side(module: str) -> bool:
        return module.startswith(TASK_SIDE_PACKAGES) or module in {
            "flinklike_spark._runtime.taskexecutor.task",
            "flinklike_spark._runtime.taskexecutor.task_executor",
        }

    imports = {m: sorted(t for t in graph[m] if task_side(t)) for m in jobmaster_side}
    assert all(not targets for targets in imports.values()), imports


@pytest.mark.parametrize(
    ("package", "below"),
    [
        ("state", ("operators", "tasks", "io", "taskexecutor", "jobmaster")),
        ("io", ("operators", "tasks", "state", "taskexecutor", "jobmaster")),
        ("operators", ("tasks", "io", "taskexecutor", "jobmaster")),
        ("tasks", ("taskexecutor", "jobmaster")),
    ],
)
def test_the_runtime_packages_import_only_downward(package, below):
    """The task loop uses operators and barrier handling, operators use state; never the reverse."""
    graph = _import_graph()
    modules = [m for m in graph if m.startswith(f"flinklike_spark._runtime.{package}.")]
    assert modules, f"the {package} package moved: update this test"
    forbidden = tuple(f"flinklike_spark._runtime.{other}." for other in below)
    upward = {m: sorted(t for t in graph[m] if t.startswith(forbidden)) for m in modules}
    assert all(not targets for targets in upward.values()), upward
