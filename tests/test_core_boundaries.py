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
