"""The layer table of docs/architecture.md is the code's: every import of a
project module by another package's module (at module level, in a function,
or for type checking alone) is one its "Import rules" block allows, and
no two modules of sim/ or chaos/ import each other, directly or around a
loop at run time (imports for type checking alone may). The core's own
allow-list (no I/O, no shells) is tests/test_core_boundaries.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("linkd", "admin", "sim", "chaos", "mirror")
PROJECT = (*PACKAGES, "ccr")


def _rules() -> dict[str, tuple[str, ...]]:
    """The fenced block under "Import rules": `importer: allowed, ...`."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(r"### Import rules.*?```text\n(.*?)```", text, re.S)
    assert found, 'docs/architecture.md has no "### Import rules" block'
    rules: dict[str, tuple[str, ...]] = {}
    for line in found.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            who, _, allowed = line.partition(":")
            rules[who.strip()] = tuple(a.strip() for a in allowed.split(",") if a.strip())
    return rules


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _modules() -> dict[str, Path]:
    return {_module(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(module: str, path: Path, modules: set[str], typing: bool = True) -> set[str]:
    """Project modules `module` imports (without those under `if
    TYPE_CHECKING:` unless `typing`); `from p import m` names the module p.m
    when there is one, else the package p."""
    out: set[str] = set()
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    if not typing:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(n) for b in node.body for n in ast.walk(b))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in out if m.split(".")[0] in PROJECT}


def _owner(module: str, rules: dict[str, tuple[str, ...]]) -> str:
    return max((r for r in rules if module == r or module.startswith(r + ".")), key=len)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_import_across_packages_is_one_the_table_allows() -> None:
    rules = _rules()
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        owner = _owner(module, rules)
        allowed = (owner, *rules[owner])
        for name in sorted(_imports(module, path, set(modules))):
            if not _within(name, allowed):
                wrong.append(
                    f"{module} imports {name} (the {owner} layer may import: "
                    f"{', '.join(rules[owner]) or 'nothing outside itself'})"
                )
    assert not wrong, "\n".join(wrong)


def test_the_table_is_a_layering__every_layer_imports_only_layers_listed_before_it() -> None:
    # The arrows all point down: a layer may import only layers whose line
    # comes before its own (generated code, `ccr`, is below them all).
    rules = _rules()
    order = list(rules)
    upward = []
    for i, who in enumerate(order):
        for allowed in rules[who]:
            if allowed in ("-", "ccr") or allowed.startswith("ccr."):
                continue
            owner = _owner(allowed, rules)
            if order.index(owner) >= i and owner != who:
                upward.append(f"{who} may import {allowed}, of the layer {owner} listed after it")
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize("package", ["sim", "chaos"])
def test_no_import_cycle(package: str) -> None:
    modules = {m: p for m, p in _modules().items() if m.split(".")[0] == package}
    names = set(modules)
    graph = {
        m: {n for n in _imports(m, p, names, typing=False) if n in names and n != m}
        for m, p in modules.items()
    }
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join([*trail[trail.index(n) :], n]))
            elif n not in state:
                visit(n, [*trail, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


# A comment or docstring of the simulator saying it does what the daemon's
# code does is a rule written twice: such a rule belongs in the core, which
# both shells run (the daemon as a fault model or a deployment is fine).
IMITATION = re.compile(
    r"as the daemon|the daemon does|like the daemon|the daemon's (?:own )?`?\w+`? does"
    r"|the daemon's `_\w+`|\(node\.\w+\)|`node\.\w+`|linkd/(?:node|replication|link_runner)\.py",
    re.I,
)


def test_no_simulator_comment_says_it_copies_the_daemon() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "sim").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if IMITATION.search(line)
    ]
    assert found == [], "\n".join(found)
