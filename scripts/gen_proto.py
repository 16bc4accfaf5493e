"""Regenerate the Python gRPC code in proto/gen/ccr/ from the contracts in proto/.

Run: python scripts/gen_proto.py          (writes proto/gen/ccr/)
     python scripts/gen_proto.py --check  (exit 1 if proto/gen/ccr/ is stale)

The contracts are proto/ccr/v1/*.proto (hand-written); the code generated from
them lives apart, under proto/gen/, and is imported as `ccr.v1` (the package
path of the .proto files; pyproject.toml maps it there).

The output depends only on proto/ and on the pinned grpcio-tools version, so the
committed files are reproducible; tests/test_proto_generated.py runs --check.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
GEN_DIR = PROTO_DIR / "gen"
OUT_PACKAGE = "ccr"


def generate(out_root: Path) -> list[Path]:
    # Only the project's own contracts: proto/google/ holds the standard
    # messages other languages need beside them (google.rpc.Status), which
    # Python imports from googleapis-common-protos.
    sources = sorted((PROTO_DIR / OUT_PACKAGE).rglob("*.proto"))
    if not sources:
        raise SystemExit(f"no .proto files under {PROTO_DIR}")
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *[str(s.relative_to(PROTO_DIR)) for s in sources],
    ]
    # The mypy plugins are console scripts installed beside this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # Make every generated directory an importable package.
    for directory in [out_root / OUT_PACKAGE, *(out_root / OUT_PACKAGE).rglob("*")]:
        if directory.is_dir():
            init = directory / "__init__.py"
            if not init.exists():
                init.write_text(
                    '"""Generated from proto/ by scripts/gen_proto.py; do not edit."""\n'
                )
    return sorted(p for p in (out_root / OUT_PACKAGE).rglob("*") if p.is_file())


def _tree(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_root = Path(tmp)
        generate(tmp_root)
        fresh = _tree(tmp_root / OUT_PACKAGE)
        target = GEN_DIR / OUT_PACKAGE
        if args.check:
            current = _tree(target) if target.exists() else {}
            stale = sorted(
                name
                for name in set(fresh) | set(current)
                if name not in fresh
                or name not in current
                or not filecmp.cmp(fresh[name], current[name], shallow=False)
            )
            if stale:
                print("generated code is stale; run: python scripts/gen_proto.py", file=sys.stderr)
                for name in stale:
                    print(f"  {target.relative_to(ROOT)}/{name}", file=sys.stderr)
                return 1
            print(f"{target.relative_to(ROOT)}/ is current ({len(fresh)} files)")
            return 0
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(tmp_root / OUT_PACKAGE, target)
        print(f"wrote {len(fresh)} files under {target.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
