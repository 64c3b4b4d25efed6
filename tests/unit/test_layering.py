"""The layering rule of docs/architecture.md, read from the source: each layer imports only the
layers below it, and no modules import each other in a circle (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# What each layer (a folder of src/, or a shared top-level module) may import besides itself.
# The entry points (cli, demo, __main__, the package face) may import anything.
ALLOWED: dict[str, set[str]] = {
    "version": set(),
    "exitcodes": set(),
    "config": set(),
    "logsetup": {"config"},
    "importers": {"config", "exitcodes"},
    "dataplane": {"config"},
    "amqp10": {"config", "dataplane"},
    "streams": {"amqp10", "config", "dataplane"},
    "engine": {"amqp10", "config", "dataplane", "exitcodes", "streams", "version"},
    "publishing": {"amqp10", "config", "dataplane", "engine", "streams"},
    "group": {"amqp10", "config", "engine", "streams"},
    "supervisor": {"amqp10", "config", "dataplane", "engine", "streams", "exitcodes", "group", "logsetup", "version"},
    "http": {"amqp10", "config", "dataplane", "engine", "streams", "exitcodes", "group", "supervisor", "version"},
    "testing": set(),
    "spark": {"amqp10", "config", "dataplane", "engine", "streams", "publishing", "testing"},
}
ENTRY_POINTS = {"cli", "demo", "__main__", "__init__"}
# The native data plane pumpd._fastpath (src/_fastpath.pyx, fixed at the package's top by the
# build) belongs to the dataplane layer: it implements dataplane/api.py's contract.
NATIVE_LAYER = {"_fastpath": "dataplane"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[:2] == ["spark", "pyspark_pumpd"]:
            continue  # the shipped top-level shim, outside the package
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(["pumpd", *parts])] = path
    found["pumpd._fastpath"] = SRC / "_fastpath.pyx"
    return found


def _imports(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    if path.suffix == ".pyx":
        # Cython: its Python-level imports are plain `from pumpd... import` lines, in the .pyx
        # or the parts it includes
        text = "\n".join(p.read_text() for p in [path, *sorted(SRC.glob("_fastpath_parts/*.pxi"))])
        lines = [ln for ln in text.splitlines() if ln.startswith("from pumpd")]
        tree = ast.parse("\n".join(lines))
    else:
        tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import submodule` imports the submodule
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target
                     for a in node.names]
        else:
            continue
        out.update(n for n in names if n == "pumpd" or n.startswith("pumpd."))
    out.discard(module)
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return NATIVE_LAYER.get(parts[1], parts[1]) if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, m, modules) for m, p in modules.items()}


def test_every_layer_is_known() -> None:
    layers = {_layer(m) for m in _modules()}
    assert layers <= set(ALLOWED) | ENTRY_POINTS


def test_no_layer_imports_from_above() -> None:
    wrong = []
    for module, targets in _graph().items():
        layer = _layer(module)
        if layer in ENTRY_POINTS:
            continue
        for target in targets:
            if _layer(target) not in ALLOWED[layer] | {layer}:
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_only_the_implementation_picker_imports_the_native_plane() -> None:
    importers = sorted(m for m, targets in _graph().items()
                       if "pumpd._fastpath" in targets and _layer(m) not in ENTRY_POINTS)
    assert importers == ["pumpd.dataplane.implementation"]


def test_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_parsing_never_imports_pika() -> None:
    # URIs parse, links connect: pika is the engine's business (engine/link.py, parameters.py)
    wrong = []
    for folder in ("config", "importers"):
        for path in (SRC / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                wrong += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "pika"]
    assert wrong == []
