"""The package's layout rules (docs/DESIGN.md, "Layout"), read from the source with ``ast``.

Every import counts: at module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "airflow_provider_staged"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
FACE = {"__init__.py", "get_provider_info.py"}
# What the pure staging core may not import: the engine, the Airflow binding, the CLI, the
# local stack, the SQL client, materialized tables; nor Airflow or Spark themselves.
CORE_FORBIDDEN = {
    f"{PACKAGE}.{name}" for name in ("engine", "airflow", "cli", "local", "sql", "materialized")
}
CORE_FORBIDDEN_THIRD_PARTY = {"airflow", "pyspark"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ours that ``name`` (a module or a module's attribute) is in, if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> tuple[set[str], set[str]]:
    """(modules of ours, top-level third-party packages) that ``module`` imports anywhere."""
    ours: set[str] = set()
    others: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] if base.startswith(PACKAGE) else [base]
        else:
            continue
        for name in names:
            if name.split(".")[0] == PACKAGE:
                owner = _owner(name)
                if owner and owner != module:
                    ours.add(owner)
            else:
                others.add(name.split(".")[0])
    return ours, others


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in GRAPH[node][0]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


def test_the_package_root_holds_only_its_face() -> None:
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name not in FACE)
    assert loose == [], f"modules at the package root: {loose}"


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_the_staging_core_imports_no_engine_airflow_cli_or_local_stack() -> None:
    core = f"{PACKAGE}.staging"
    offending = {
        module: sorted(
            {name for name in ours if any(name == f or name.startswith(f + ".") for f in CORE_FORBIDDEN)}
            | (others & CORE_FORBIDDEN_THIRD_PARTY)
        )
        for module, (ours, others) in GRAPH.items()
        if module == core or module.startswith(core + ".")
    }
    assert {module: names for module, names in offending.items() if names} == {}


def test_only_the_cli_imports_the_local_stack() -> None:
    local = f"{PACKAGE}.local"
    readers = {
        module.removeprefix(PACKAGE + ".")
        for module, (ours, _) in GRAPH.items()
        if not module.startswith((local, f"{PACKAGE}.cli")) and any(n.startswith(local) for n in ours)
    }
    # The rest of the product finds the embedded services through discovery/, which starts nothing.
    assert readers == set()


def test_the_rules_see_imports_inside_functions_and_type_checking() -> None:
    # The checker itself: a lazy import and a TYPE_CHECKING one both count (a cycle through either
    # is a cycle), so a rule above cannot pass by moving an import into a function.
    ours, _ = GRAPH[f"{PACKAGE}.engine.spark_job"]
    assert f"{PACKAGE}.engine.jdbc_write" in ours  # imported inside write_jdbc
    ours, _ = GRAPH[f"{PACKAGE}.engine.base"]
    assert f"{PACKAGE}.staging.settings" in ours  # imported under TYPE_CHECKING
