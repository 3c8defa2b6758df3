"""The layers of docs/architecture.md hold in the code: read from the imports themselves (AST),
including the lazy imports inside functions, so no test run can hide one."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "memleak"

# Lowest first. A module may import its own layer and the ones before it, never one after.
LAYERS = [
    ("records", ["schema", "records", "errors", "units", "holder_names", "collector"]),
    ("data", ["run", "snapshot"]),
    ("files", ["io"]),
    ("probes", ["probes"]),
    ("detectors", ["detect"]),
    ("ranking", ["suspects"]),
    ("report", ["report"]),
    ("analysis", ["analysis"]),
    ("recorder", ["recorder", "planning"]),
    ("integrations", ["cli", "demo", "integrations", "__main__", "__init__"]),
]
LAYER_OF = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
#: Layers that must run on any machine: a run is analysed without torch.
NO_TORCH = ("records", "data", "files", "detectors", "ranking", "report", "analysis")


def modules() -> dict[str, Path]:
    """Dotted name -> file; a package is named by its folder (memleak.probes, not memleak.probes.__init__)."""
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports_of(name: str, path: Path) -> set[str]:
    """Every module `name` imports (absolute names), at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x` may name a module
    return out


def layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else "__init__"
    return LAYER_OF[top]


MODULES = modules()


def test_every_module_has_a_layer():
    assert all(layer(m) is not None for m in MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_runs_up_a_layer(name):
    own = layer(name)
    # the package face (memleak/__init__.py) loads nothing at import: taking __version__ from it is no arrow
    ups = sorted(m for m in imports_of(name, MODULES[name]) if m in MODULES and m != "memleak" and layer(m) > own)
    assert not ups, f"{name} ({LAYERS[own][0]}) imports from a higher layer: {ups}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if LAYERS[layer(m)][0] in NO_TORCH))
def test_analysis_layers_never_import_torch(name):
    found = sorted(m for m in imports_of(name, MODULES[name]) if m == "torch" or m.startswith("torch."))
    assert not found, f"{name} imports {found}: detectors, data, files and reports must work without torch"


def test_no_import_cycle():
    graph = {m: {i for i in imports_of(m, p) if i in MODULES and i != m} for m, p in MODULES.items()}
    # a package's __init__ re-exporting its modules is no cycle of behaviour: drop edges into a package face
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, stack: list[str]) -> bool:
        state[m] = 1
        for n in sorted(graph[m]):
            if MODULES[n].name == "__init__.py" and m.startswith(n + "."):
                continue  # a module importing its own package's face
            if state.get(n) == 1:
                cycle.extend([*stack[stack.index(n):], n] if n in stack else [m, n])
                return True
            if state.get(n) is None and visit(n, [*stack, n]):
                return True
        state[m] = 2
        return False

    for m in sorted(graph):
        if state.get(m) is None and visit(m, [m]):
            break
    assert not cycle, " -> ".join(cycle)


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_small_rooms():
    """Small modules with one job each, and functions short enough to read at once."""
    too_long = []
    for name, path in modules().items():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert not too_long, too_long
