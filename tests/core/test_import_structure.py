"""The package's import structure (docs/design.md, "Packages"): imports go
downwards only, and no import inside a function holds a circle open."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pyg_dynscale"
#: docs/design.md: errors <- data <- partition <- nn <- training <- runtime <- distributed / windows / ctdg <- commands /
#: cli; the package root re-exports the layers below it, so only the command-line layer may import it (for ``__version__``)
LAYERS = {"errors": 0, "names": 0, "_archive": 0, "_optional": 0, "data": 1, "partition": 2, "nn": 3, "training": 4,
          "runtime": 5, "distributed": 6, "windows": 6, "ctdg": 6, "commands": 7, "cli": 7, "__main__": 7, "": 7}


def _modules() -> dict:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = ("pyg_dynscale",) + path.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(mods: dict) -> list:
    """``(importer, imported, inside_a_function)`` for every ``from ... import``
    between package modules outside ``if TYPE_CHECKING`` blocks."""
    edges = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        skip, lazy = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(c) for c in ast.walk(node))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lazy.update(id(c) for c in ast.walk(node))
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in skip:
                continue
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                target = base + ("." + node.module if node.module else "")
            else:
                target = node.module or ""
            if not target.startswith("pyg_dynscale"):
                continue
            for alias in node.names:
                full = target + "." + alias.name
                edges.append((name, full if full in mods else target, id(node) in lazy))
    return edges


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def test_imports_go_downwards_only():
    up = [(a, b) for a, b, _ in _imports(_modules()) if _layer(b) > _layer(a)]
    assert not up, f"upward imports: {up}"


def test_no_circle_is_held_open_by_an_import_inside_a_function():
    edges = _imports(_modules())
    graph: dict = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)

    def reaches(src: str, dst: str) -> bool:
        seen, todo = {src}, [src]
        while todo:
            x = todo.pop()
            if x == dst:
                return True
            for y in graph.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return False

    circles = sorted({(a, b) for a, b, lazy in edges if lazy and reaches(b, a)})
    assert not circles, f"imports inside functions that close a circle: {circles}"


def test_the_checks_see_the_package():
    edges = _imports(_modules())
    assert len(edges) > 200
    assert ("pyg_dynscale.distributed.trainer", "pyg_dynscale.distributed.time_windows", False) in edges


def test_no_private_name_is_borrowed_from_another_module():
    """``from .x import _name`` and ``x._name`` on an imported package module are
    refused: what another module needs is public there."""
    mods = _modules()
    borrowed = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        aliases = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("pyg_dynscale")):
                continue
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            target = (base + "." + node.module if node.module else base) if node.level else node.module
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    borrowed.append(f"{name}: from {target} import {alias.name}")
                if target + "." + alias.name in mods:
                    aliases.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                borrowed.append(f"{name}: {node.value.id}.{node.attr}")
    assert not borrowed, borrowed
