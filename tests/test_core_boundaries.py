"""The functional core imports no I/O, clocks, threads, randomness or shells."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "linkd" / "core"
FORBIDDEN = {
    "time",
    "random",
    "uuid",
    "os",
    "asyncio",
    "threading",
    "socket",
    "subprocess",
    "grpc",
    "pyspark",
    "networkx",
    "datetime",
    "secrets",
    "pathlib",
    "shutil",
    "io",
    "ccr",
    "admin",
    "sim",
    "concurrent",
    "multiprocessing",
    "signal",
    "select",
    "logging",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
            if node.module.startswith("linkd.") and not node.module.startswith("linkd.core"):
                names.add(node.module)
    return names


def test_core_modules_import_nothing_impure() -> None:
    offenders = {}
    for path in sorted(CORE.rglob("*.py")):
        bad = sorted(n for n in _imports(path) if n in FORBIDDEN or n.startswith("linkd."))
        if bad:
            offenders[path.name] = bad
    assert offenders == {}, f"core modules import impure or shell modules: {offenders}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom linkd.node import ClusterNode\n")
    assert {"time", "linkd.node"} <= _imports(bad)
