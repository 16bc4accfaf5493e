"""The core's face stays typed (a ratchet: the counts here may only go down).

Two counts, read from the source with `ast`:

- signatures in linkd/core/ whose annotations mention `Any` (or a name bound
  to it, such as `journal.Json`), outside the storage codec: the journal's
  record codec (`linkd/core/journal.py`) and the snapshot's stored form and
  replay (`linkd/core/restart.py`), where JSON crosses into the core;
- comparisons in linkd/ and sim/ of an expression with a string literal that
  a member of one of the project's enums already names (its value, or its
  name for an enum whose values are not strings): `x == "FOLLOWING"`,
  `x != "leader"`, `x in ("ASYNC", "SYNC")`. Those should compare the enum.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import itertools
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The storage codec: where the core's stored JSON is encoded and decoded.
CODEC = {"linkd/core/journal.py", "linkd/core/restart.py"}

# Comparisons of a literal that an enum names but that means something else
# there: (file, the comparison as written).
NOT_ENUM_VALUES = {
    # Kafka's protocol type names ("bytes", "records"), not a metric's unit.
    ("linkd/kafka/guard.py", 'kafka_type in ("bytes", "records")'),
    # MirrorMaker's property key `enabled`, not exactly.once.source.support's value.
    ("linkd/core/mirror/config.py", 'key == "enabled"'),
    ("linkd/core/mirror/config.py", 'name == "enabled"'),
    # A fault's key `loss` (the share of messages lost), not the fault kind.
    ("sim/scenario.py", 'key == "loss"'),
}

# Ceilings per directory (only ever lowered).
ANY_CEILING = 0
STRING_COMPARE_CEILING = {"linkd": 0, "sim": 0}


def _python_files(directory: str) -> list[Path]:
    return sorted(p for p in (ROOT / directory).rglob("*.py") if "__pycache__" not in p.parts)


def _any_names(tree: ast.Module) -> set[str]:
    """`Any`, and the module-level names bound to it (`Json = Any`)."""
    names = {"Any", "Json"}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            if node.value.id in names:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _mentions(annotation: ast.expr | None, names: set[str]) -> bool:
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in names:
            return True
        if isinstance(node, ast.Attribute) and node.attr in names:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                continue
            if _mentions(inner, names):
                return True
    return False


def any_signatures() -> list[str]:
    found = []
    for path in _python_files("linkd/core"):
        rel = path.relative_to(ROOT).as_posix()
        if rel in CODEC:
            continue
        tree = ast.parse(path.read_text(), rel)
        names = _any_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            if _mentions(node.returns, names) or any(_mentions(a.annotation, names) for a in every):
                found.append(f"{rel}:{node.lineno} {node.name}")
    return found


def _project_enums() -> list[type[enum.Enum]]:
    """Every enum class defined in linkd/ and sim/ (their modules imported)."""
    found: dict[str, type[enum.Enum]] = {}
    for package in ("linkd", "sim"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith(".__main__"):
                continue
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, enum.Enum)
                    and value.__module__ == info.name
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


@functools.cache
def enum_strings() -> dict[str, str]:
    """Each string an enum member names, and the member (for messages)."""
    out: dict[str, str] = {}
    for cls in _project_enums():
        for member in cls:
            text = member.value if isinstance(member.value, str) else member.name
            if isinstance(text, str) and text:
                out.setdefault(text, f"{cls.__qualname__}.{member.name}")
    return out


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return [v for v in items if isinstance(v, str)]
    return []


def string_compares(directory: str, strings: dict[str, str]) -> list[str]:
    found = []
    for path in _python_files(directory):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        tree = ast.parse(text, rel)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for op, (left, right) in zip(node.ops, itertools.pairwise(operands), strict=True):
                if isinstance(op, ast.Eq | ast.NotEq):
                    texts = _literals(left) if isinstance(left, ast.Constant) else []
                    texts += _literals(right) if isinstance(right, ast.Constant) else []
                elif isinstance(op, ast.In | ast.NotIn):
                    texts = [] if isinstance(right, ast.Constant) else _literals(right)
                else:
                    continue
                named = [strings[t] for t in texts if t in strings]
                if not named:
                    continue
                # The segment is looked up only for a hit (it reads the text again).
                source = " ".join((ast.get_source_segment(text, node) or "").split())
                if (rel, source) not in NOT_ENUM_VALUES:
                    found.append(f"{rel}:{node.lineno} {source}  [{', '.join(named)}]")
    return found


def test_no_any_in_core_signatures() -> None:
    found = any_signatures()
    assert len(found) <= ANY_CEILING, "\n".join(found)


@pytest.mark.parametrize("directory", sorted(STRING_COMPARE_CEILING))
def test_enum_values_are_compared_as_enums(directory: str) -> None:
    found = string_compares(directory, enum_strings())
    assert len(found) <= STRING_COMPARE_CEILING[directory], "\n".join(found)


if __name__ == "__main__":
    print("any signatures:", len(any_signatures()))
    table = enum_strings()
    for d in ("linkd/core", "linkd", "sim", "chaos", "admin"):
        hits = string_compares(d, table)
        print(d, len(hits))
        if d in ("linkd", "sim"):
            print("\n".join(hits))
