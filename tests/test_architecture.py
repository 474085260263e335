"""The layout stays a tree: layers import downwards only, no module imports itself back
(counting imports inside functions), and the core never imports a model.

The rules are docs/architecture.md's; the graph comes from parsing every source file,
so an import hidden in a function body counts like one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject's package-dir)
FOLDERS = {"flops_fit": ROOT / "flops_fit", "flops_fit.plugins": ROOT / "plugins", "flops_fit.parity": ROOT / "parity"}

# The core's layers, bottom to top: a module may import its own layer or a lower one.
LAYERS = [
    ("foundation", ("flops_fit._version", "flops_fit.errors", "flops_fit.checks", "flops_fit.tables", "flops_fit.files",
                    "flops_fit.machine")),
    ("plugin", ("flops_fit.plugin", "flops_fit.testing")),
    ("api", ("flops_fit",)),  # the root package: the public names and the lazy table
    ("store", ("flops_fit.store",)),
    ("tracking", ("flops_fit.tracking",)),
    ("sources", ("flops_fit.sources",)),
    # the fitting layer's own stack: the shared base, then one sub-package per role, then its facade
    ("fitting base", ("flops_fit.fitting.inputs", "flops_fit.fitting.scales", "flops_fit.fitting.formatting")),
    ("fitting laws", ("flops_fit.fitting.laws",)),
    ("fitting validation", ("flops_fit.fitting.validation",)),
    ("fitting decisions", ("flops_fit.fitting.decisions",)),
    ("fitting approaches", ("flops_fit.fitting.approaches",)),
    ("fitting report", ("flops_fit.fitting.report",)),
    ("fitting", ("flops_fit.fitting",)),  # the facade: fit(), APPROACHES, synthetic sweeps
    ("executors", ("flops_fit.executors",)),
    ("training", ("flops_fit.training",)),
    ("sweeps", ("flops_fit.sweeps",)),
    ("tuning", ("flops_fit.tuning",)),
    ("cli", ("flops_fit.cli", "flops_fit.__main__")),
]
# Outside the core: built-in plugins and the parity suite sit beside it, on the plugin layer.
OUTSIDE = {
    "flops_fit.plugins": ("foundation", "plugin", "api", "flops_fit.plugins"),
    "flops_fit.parity": ("foundation", "plugin", "api", "flops_fit.plugins", "flops_fit.parity", "flops_fit.sweeps.gate"),
}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            if path.name.startswith("test_") or "build" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if package == "flops_fit" and parts[0] in ("plugins", "parity"):
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def _owner(name: str) -> str | None:
    """The project module an imported name lives in (``a.b.c`` -> ``a.b`` if ``c`` is a name in it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> list[tuple[str, bool, int]]:
    """(imported project module, inside a function?, line) for every import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    # `if TYPE_CHECKING:` imports never run: they are what IDEs see, not edges of the graph
    for_checkers = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and getattr(b.test, "id", "") == "TYPE_CHECKING"
                    for n in ast.walk(b)}
    found = []
    for node in ast.walk(tree):
        if id(node) in for_checkers:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}" if base else parent
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            owner = _owner(name) if name.startswith("flops_fit") else None
            if owner and owner != module:
                found.append((owner, id(node) in in_function, node.lineno))
    return found


GRAPH = {m: imports(m) for m in MODULES}


def layer_of(module: str) -> int | None:
    """Index in LAYERS of a core module (the longest matching prefix wins); None outside the core."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def outside_group(module: str) -> str | None:
    return next((g for g in OUTSIDE if module == g or module.startswith(g + ".")), None)


def test_every_core_module_has_a_layer():
    unplaced = [m for m in MODULES if outside_group(m) is None and layer_of(m) is None]
    assert not unplaced, f"add these to LAYERS (and docs/architecture.md): {unplaced}"


def test_the_core_imports_only_its_own_layer_or_below():
    upward = []
    for module, edges in GRAPH.items():
        if outside_group(module):
            continue
        for target, _, line in edges:
            if outside_group(target):
                upward.append(f"{module}:{line} imports {target} (the core imports no plugin or parity module)")
            elif layer_of(target) > layer_of(module):
                upward.append(f"{module}:{line} ({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]}, a higher layer)")
    assert not upward, "\n".join(upward)


def test_plugins_and_parity_import_only_what_sits_beside_or_below_them():
    allowed_layers = {name for name, _ in LAYERS}
    bad = []
    for module, edges in GRAPH.items():
        group = outside_group(module)
        if group is None:
            continue
        allowed = OUTSIDE[group]
        for target, _, line in edges:
            if target in allowed or outside_group(target) in allowed:
                continue
            layer = layer_of(target)
            if layer is not None and LAYERS[layer][0] in allowed and LAYERS[layer][0] in allowed_layers:
                continue
            bad.append(f"{module}:{line} imports {target}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles_counting_imports_inside_functions():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in GRAPH[v]:
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
                cycles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_project_modules_are_imported_at_the_top_of_a_module():
    """Imports inside functions are for heavy optional libraries only; the project's own
    modules are reached at module level (or through the lazy public API, by attribute)."""
    hidden = [f"{m}:{line} imports {t}" for m, edges in GRAPH.items() for t, inside, line in edges if inside]
    assert not hidden, "\n".join(hidden)


def test_the_architecture_doc_names_every_layer_and_package():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [name for name, prefixes in LAYERS for name in (name, *prefixes) if name not in doc]
    assert not missing, f"docs/architecture.md does not mention {missing}"


def test_each_fitting_module_is_named_in_its_sub_packages_row():
    """docs/architecture.md's row of each fitting sub-package names every module in it, so the
    page finds the module for a concept."""
    doc = (ROOT / "docs" / "architecture.md").read_text().splitlines()
    missing = []
    for module in MODULES:
        if not module.startswith("flops_fit.fitting.") or outside_group(module):
            continue
        layer = LAYERS[layer_of(module)][0]
        row = next((line for line in doc if line.startswith(f"| {layer} |")), "")
        if f"`{module.rpartition('.')[2]}`" not in row and f"`{module}`" not in row:
            missing.append(f"{module} (row '{layer}')")
    assert not missing, f"docs/architecture.md's rows do not name: {missing}"


def test_every_module_is_named_on_the_architecture_page():
    """docs/architecture.md named every core module but 40 of the built-in plugins' and the parity
    suite's not at all: each module's name is now on the page (a row of the core's layers, or of
    the table beside the core), so the page finds every module."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [m for m, path in MODULES.items() if path.stem != "__init__"
               and f"`{path.stem}`" not in doc and f"{path.relative_to(ROOT).as_posix()}`" not in doc
               and f"`{m}`" not in doc]
    assert not missing, f"docs/architecture.md does not name: {missing}"
