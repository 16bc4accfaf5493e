"""The functional core imports no I/O, clocks, threads, randomness or shells.

An allow-list, not a deny-list: a core module may import only the standard
library modules named here, the few pure third-party codecs the record format
needs, and other core modules (absolute `linkd.core...` or relative imports
that stay inside `linkd/core/`). Every import form is checked: `import x.y`,
`from x import y`, `from linkd import x` (which names a shell module), and
relative imports (`from .. import node` leaves the core).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parent.parent / "linkd" / "core"

ALLOWED_STDLIB = {
    "__future__",
    "abc",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "contextlib",
    "copy",
    "dataclasses",
    "enum",
    "fnmatch",
    "functools",
    "hashlib",
    "heapq",
    "hmac",
    "ipaddress",
    "itertools",
    "json",
    "math",
    "operator",
    "re",
    "string",
    "struct",
    "textwrap",
    "typing",
    "zlib",
}
# Pure codecs of the Kafka record format (compression, CRC-32C).
ALLOWED_THIRD_PARTY = {"cramjam", "crc32c"}


def _module_of(path: Path) -> list[str]:
    """The dotted package of `path` relative to the repository (for relative imports)."""
    rel = path.relative_to(CORE.parent.parent).with_suffix("")
    return list(rel.parts[:-1])


def _imports(path: Path, package: list[str] | None = None) -> set[str]:
    """Every module `path` imports, as an absolute dotted name."""
    pkg = _module_of(path) if package is None else package
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = node.level - 1
                base = pkg[: len(pkg) - up] if up else list(pkg)
                if up > len(pkg):
                    base = []
                prefix = ".".join(base)
            else:
                prefix = ""
            module = ".".join(p for p in (prefix, node.module or "") if p)
            if module in ("linkd", "linkd.core") or not node.module:
                # `from linkd import node`: each name may be a module.
                names.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                names.add(module)
    return names


def _allowed(name: str) -> bool:
    top = name.split(".")[0]
    if top == "linkd":
        return name == "linkd.core" or name.startswith("linkd.core.")
    return top in ALLOWED_STDLIB or top in ALLOWED_THIRD_PARTY


def _offenders(paths: list[Path], package: list[str] | None = None) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        bad = sorted(n for n in _imports(path, package) if not _allowed(n))
        if bad:
            found[path.name] = bad
    return found


def test_core_modules_import_only_the_allow_list() -> None:
    offenders = _offenders(sorted(CORE.rglob("*.py")))
    assert offenders == {}, f"core modules import outside the allow-list: {offenders}"


@pytest.mark.parametrize(
    ("source", "package", "caught"),
    [
        ("import time\n", ["linkd", "core"], "time"),
        ("import linkd.node\n", ["linkd", "core"], "linkd.node"),
        ("from linkd.node import ClusterNode\n", ["linkd", "core"], "linkd.node"),
        ("from linkd import node\n", ["linkd", "core"], "linkd.node"),
        ("from .. import node\n", ["linkd", "core"], "linkd.node"),
        ("from ..replication import LinkManager\n", ["linkd", "core"], "linkd.replication"),
        ("from ... import node\n", ["linkd", "core", "mirror"], "linkd.node"),
        ("import sim.world\n", ["linkd", "core"], "sim.world"),
        ("from grpc import aio\n", ["linkd", "core"], "grpc"),
    ],
)
def test_the_check_fails_on_a_planted_import(
    tmp_path: Path, source: str, package: list[str], caught: str
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert caught in _imports(bad, package)
    assert _offenders([bad], package) == {"bad.py": [caught]}


@pytest.mark.parametrize(
    ("source", "package"),
    [
        ("from . import errors\n", ["linkd", "core"]),
        ("from .errors import ClusterError\n", ["linkd", "core"]),
        ("from ..links import LinkTable\n", ["linkd", "core", "mirror"]),
        ("from linkd.core import effects\n", ["linkd", "core"]),
        ("import dataclasses\n", ["linkd", "core"]),
    ],
)
def test_the_check_lets_core_imports_pass(tmp_path: Path, source: str, package: list[str]) -> None:
    ok = tmp_path / "ok.py"
    ok.write_text(source)
    assert _offenders([ok], package) == {}


def _core_graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports at its top level."""
    graph: dict[str, set[str]] = {}
    for path in sorted(CORE.rglob("*.py")):
        parts = list(path.relative_to(CORE.parent.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        graph[name] = {n for n in _imports(path) if n.startswith("linkd.core.")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle among the modules of `graph`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, set()) & graph.keys()):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_core_has_no_import_cycle() -> None:
    assert _cycle(_core_graph()) is None


def test_no_core_import_hides_inside_a_function() -> None:
    """A function-local import of a core module is how a cycle is dodged."""
    hidden = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").startswith("linkd")
                ):
                    hidden.append(f"{path.name}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(
                    a.name.startswith("linkd") for a in node.names
                ):
                    hidden.append(f"{path.name}:{node.lineno}")
    assert hidden == []


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
