"""Nothing outside linkd/node.py reaches into ClusterNode's private members.

The Kafka listener, the link runners and the operations talk to a node through
its public API; a private attribute read from outside is a dependency nobody
sees when node.py changes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "linkd" / "node.py"
PACKAGES = ("linkd", "sim", "chaos", "mirror", "admin")


def _private_members(path: Path, class_name: str) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name == class_name):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def _reaches(path: Path, private: set[str], root: Path = ROOT) -> list[str]:
    """Attribute reads of `private` names on anything but self or cls."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
    return found


def test_nothing_outside_node_py_touches_cluster_node_privates() -> None:
    private = _private_members(NODE, "ClusterNode")
    assert "_tick_loop" in private  # the scan sees the class
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != NODE:
                found.extend(_reaches(path, private))
    assert found == []


def test_the_scan_sees_a_planted_reach(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(node):\n    return node._group_waiters\n")
    assert _reaches(bad, {"_group_waiters"}, tmp_path) == ["bad.py:2 ._group_waiters"]
    assert _reaches(bad, {"_other"}, tmp_path) == []
