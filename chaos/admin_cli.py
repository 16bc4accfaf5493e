"""`ccr-admin` run in this process, as its console script would run it.

The chaos crash matrix (chaos/crash_matrix.py) and the tests call the CLI
this way: the same commands and the same `--json` answers an operator sees,
without a process start per call. It swaps sys.stdin/stdout/stderr and the
environment, which belong to the process: call it from the main thread only.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli_in_process(
    argv: Sequence[str],
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`admin.cli.main(argv)` in this process, as `python -m admin.cli argv`
    runs it: stdin holds `input` (UTF-8 text over bytes, as a process's stdin
    is), stdout and stderr are separate UTF-8 streams, `env` is added to the
    environment for the call (and taken back after), the working directory is
    the project's, and the exit code is main's return value or argparse's
    SystemExit code. The CLI's own --timeout (30 s by default) bounds its calls."""
    from admin import cli

    raw = input.encode() if isinstance(input, str) else (input or b"")
    stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    stderr = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="backslashreplace",
                              write_through=True)
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_cwd = os.getcwd()
    code: int
    try:
        os.environ.update(env or {})
        os.chdir(ROOT)
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse: bad arguments (2) or --help (0)
            if exc.code is None or isinstance(exc.code, int):
                code = int(exc.code or 0)
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        stdout.flush()
        stderr.flush()
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(
        ["ccr-admin", *argv],
        code,
        out_bytes.getvalue().decode("utf-8", errors="replace"),
        err_bytes.getvalue().decode("utf-8", errors="replace"),
    )


__all__ = ["cli_in_process"]
