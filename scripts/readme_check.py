#!/usr/bin/env python3
"""Runs every section of README.md on its own and says which ones work.

A section is a heading (`#`, `##` or `###`) and the text up to the next one. Its
`bash` and `python` code blocks run in order as one bash script (a Python block
is fed to `python -` by a quoted here-document), with `set -euo pipefail`:

- alone: one section per script, in a random order drawn from `--seed` (printed,
  so an order that fails can be replayed), never sharing a shell;
- from the checkout's root (or from a fresh clone, `--fresh-clone`), with the
  checkout's `.venv/bin` first on PATH, as after `. .venv/bin/activate`;
- in a scratch directory of its own: TMPDIR points there, so `mktemp -d` in a
  section makes its data dirs inside it; it is removed afterwards;
- in a session of its own (a new process group): when the script ends, or its
  time (`--timeout-s`) is up, that group alone is stopped (SIGTERM, then
  SIGKILL), which ends the daemons a section started with `&` and did not stop;
- with the TCP ports it names (`127.0.0.1:PORT`) free beforehand: a section
  whose port another process holds fails saying so, instead of talking to a
  stranger. One check runs at a time on a machine (a lock file), since sections
  use fixed ports.

A block preceded by `<!-- readme-check: skip (why) -->` is not run (it takes an
hour, needs a Spark cluster, ...), but is still checked: `bash -n` parses it,
each project command in it (`linkd`, `ccr-admin`, `ccr-sim`, `ccr-chaos`) is run
with its arguments and `--help` (so its verbs exist) and every `--option` it uses
must appear in that help; scripts and files it names must exist.

Exit status: 0 when every section passed, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_MARK = re.compile(r"<!--\s*readme-check:\s*skip\s*\((?P<why>[^)]*)\)\s*-->")
HEADING = re.compile(r"^(#{1,3})\s+(.*\S)\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
PORT = re.compile(r"127\.0\.0\.1:(\d{2,5})\b")
RUN_LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
PROJECT_COMMANDS = ("linkd", "ccr-admin", "ccr-sim", "ccr-chaos")
PY_END = "README_CHECK_PYTHON_END"
# Bounds: a port held by another process is waited for this long; a stopped
# section's process group gets this long between SIGTERM and SIGKILL.
PORT_WAIT_S = 10.0
STOP_GRACE_S = 5.0
HELP_TIMEOUT_S = 60.0
OUTPUT_TAIL_LINES = 80
LOCK_NAME = "ccr-readme-check.lock"


@dataclass(frozen=True)
class Block:
    lang: str  # "bash" or "python"
    code: str
    line: int  # of the opening fence, 1-based
    skip_reason: str | None


@dataclass
class Section:
    title: str
    line: int
    blocks: list[Block] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.skip_reason is None]

    @property
    def skipped(self) -> list[Block]:
        return [b for b in self.blocks if b.skip_reason is not None]


@dataclass(frozen=True)
class Outcome:
    section: Section
    ok: bool
    seconds: float
    detail: str  # what failed, with the output; or notes on a pass


def parse_readme(text: str) -> list[Section]:
    """The sections that hold bash or python blocks, in the README's order."""
    sections: list[Section] = []
    current = Section("(before the first heading)", 1)
    pending_skip: str | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            lang, start = fence.group(1).lower(), i + 1
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if lang in RUN_LANGS:
                code = "\n".join(body) + "\n"
                current.blocks.append(Block(RUN_LANGS[lang], code, start, pending_skip))
            pending_skip = None
        elif heading := HEADING.match(line):
            sections.append(current)
            current = Section(heading.group(2), i + 1)
            pending_skip = None
        elif skip := SKIP_MARK.search(line):
            pending_skip = skip.group("why").strip() or "no reason given"
        i += 1
    sections.append(current)
    return [s for s in sections if s.blocks]


def section_script(section: Section, root: Path) -> str:
    """The bash script that runs a section's runnable blocks in order."""
    parts = ["set -euo pipefail", f"cd {shlex.quote(str(root))}"]
    for block in section.runnable:
        parts.append(f"# README line {block.line}")
        if block.lang == "bash":
            parts.append(block.code)
        else:
            if PY_END in block.code:
                raise ValueError(f"line {block.line}: a Python block may not contain {PY_END}")
            parts.append(f"python - <<'{PY_END}'\n{block.code}{PY_END}")
    return "\n".join(parts) + "\n"


# -- checks of blocks that are not run ----------------------------------------------------


def _logical_lines(code: str) -> list[str]:
    """Lines with backslash continuations joined."""
    return code.replace("\\\n", " ").splitlines()


def _commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, as words (comments dropped)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    for word in lexer:
        if word and set(word) <= set(";&|()<>"):
            out.append([])
        else:
            out[-1].append(word)
    return [words for words in out if words]


def _without_assignments(words: list[str]) -> list[str]:
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]):
        i += 1
    return words[i:]


_top_help: dict[str, str] = {}
_top_help_lock = threading.Lock()


def _help_text(argv: list[str], env: dict[str, str], root: Path) -> tuple[int, str]:
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=root, timeout=HELP_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _program_help(program: str, env: dict[str, str], root: Path) -> str:
    """`program --help`, asked once per check (the global options are listed there)."""
    with _top_help_lock:
        if program not in _top_help:
            _top_help[program] = _help_text([program, "--help"], env, root)[1]
        return _top_help[program]


def _literal_args(args: list[str]) -> list[str]:
    """The arguments without shell expansions: an option's expanded value becomes a
    placeholder, any other expanded word (`$A`, a bootstrap option list) is left out."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if "$" not in arg:
            out.append(arg)
        elif i > 0 and args[i - 1].startswith("--") and "=" not in args[i - 1]:
            out.append("VALUE")
    return out


def check_unrun_block(block: Block, env: dict[str, str], root: Path) -> list[str]:
    """Problems of a block that is not run: syntax, verbs, options, files."""
    if block.lang == "python":
        try:
            compile(block.code, f"README line {block.line}", "exec")
        except SyntaxError as exc:
            return [f"line {block.line}: Python syntax: {exc}"]
        return []
    syntax = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True,
                            check=False)  # fmt: skip
    if syntax.returncode != 0:
        return [f"line {block.line}: bash syntax: {syntax.stderr.strip()}"]
    commands = [
        _without_assignments(words)
        for line in _logical_lines(block.code)
        for words in _commands(line)
    ]
    # Each --help starts a Python program: they run side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = pool.map(lambda words: _check_command(words, block.line, env, root), commands)
        return [problem for problems in found for problem in problems]


def _check_command(words: list[str], line: int, env: dict[str, str], root: Path) -> list[str]:
    if not words:
        return []
    program, args = words[0], words[1:]
    if program in PROJECT_COMMANDS:
        literal = _literal_args(args)
        code, text = _help_text([program, *literal, "--help"], env, root)
        if code != 0:
            return [f"line {line}: `{shlex.join(words)}`: --help exits {code}: {text.strip()}"]
        known = text + _program_help(program, env, root)
        unknown = [
            a.split("=", 1)[0] for a in literal
            if a.startswith("--") and a.split("=", 1)[0] not in known
        ]  # fmt: skip
        return [f"line {line}: `{program}`: unknown option {u}" for u in unknown]
    if program in ("bash", "sh", "python", "python3", ".venv/bin/python", "pytest") and args:
        target = next((a for a in args if not a.startswith("-")), None)
        if target and "/" in target and "$" not in target and not (root / target).exists():
            return [f"line {line}: `{shlex.join(words)}`: {target} does not exist"]
    return []


# -- running a section --------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _busy_ports(section: Section, wait_s: float) -> list[int]:
    ports = sorted({int(p) for b in section.runnable for p in PORT.findall(b.code)})
    deadline = time.monotonic() + wait_s
    while True:
        busy = [p for p in ports if not _port_free(p)]
        if not busy or time.monotonic() >= deadline:
            return busy
        time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_group_gone(pgid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while _group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _stop_group(pgid: int) -> list[str]:
    """The section's process group only: a moment for what the section stopped
    itself to finish stopping, then SIGTERM, then SIGKILL."""
    if _wait_group_gone(pgid, STOP_GRACE_S):
        return []
    notes = ["it left processes running; they were stopped"]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
        if not _wait_group_gone(pgid, STOP_GRACE_S):
            os.killpg(pgid, signal.SIGKILL)
            notes.append("some needed SIGKILL")
    return notes


def _tail(text: str) -> str:
    lines = text.splitlines()
    cut = lines[-OUTPUT_TAIL_LINES:]
    head = [f"... ({len(lines) - len(cut)} earlier lines)"] if len(lines) > len(cut) else []
    return "\n".join(head + cut)


def run_section(
    section: Section,
    root: Path,
    env: dict[str, str],
    timeout_s: float,
    port_wait_s: float = PORT_WAIT_S,
) -> Outcome:
    started = time.monotonic()
    problems: list[str] = []
    for block in section.skipped:
        problems += check_unrun_block(block, env, root)
    if not section.runnable:
        detail = "; ".join(problems) or "not run (" + "; ".join(
            sorted({b.skip_reason or "" for b in section.skipped})) + "); commands checked"
        return Outcome(section, not problems, time.monotonic() - started, detail)
    busy = _busy_ports(section, port_wait_s)
    if busy:
        detail = f"port(s) {busy} held by another process; the section uses fixed ports"
        return Outcome(section, False, time.monotonic() - started, detail)
    scratch = Path(tempfile.mkdtemp(prefix="readme-section-"))
    try:
        script = scratch / "section.sh"
        script.write_text(section_script(section, root))
        section_env = {**env, "TMPDIR": str(scratch)}
        proc = subprocess.Popen(
            ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=section_env, cwd=root, start_new_session=True,
        )  # fmt: skip
        output: list[bytes] = []
        reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
        reader.start()
        timed_out = False
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = -1
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        notes = _stop_group(proc.pid)
        proc.wait()
        reader.join(timeout=STOP_GRACE_S)
        text = b"".join(output).decode("utf-8", errors="replace")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.monotonic() - started
    if timed_out:
        problems.append(f"still running after {timeout_s:g} s")
    elif code != 0:
        problems.append(f"exit status {code}")
    if problems:
        return Outcome(section, False, seconds, "; ".join(problems) + "\n" + _tail(text))
    return Outcome(section, True, seconds, "; ".join(notes))


# -- the command --------------------------------------------------------------------------


@contextlib.contextmanager
def _one_check_at_a_time() -> Iterator[None]:
    """Sections use fixed ports: two checks on one machine would meet on them."""
    path = Path(tempfile.gettempdir()) / LOCK_NAME
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fresh_clone(checkout: Path, into: Path) -> Path:
    clone = into / "clone"
    subprocess.run(["git", "clone", "--quiet", str(checkout), str(clone)], check=True)
    print("readme-check: setting up .venv in the fresh clone", file=sys.stderr, flush=True)
    subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, check=True)
    return clone


def _environment(root: Path) -> dict[str, str]:
    venv = root / ".venv"
    if not (venv / "bin" / "python").exists():
        raise SystemExit(f"readme-check: {venv} is missing: run `bash scripts/setup.sh` first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CCR_")}
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--readme", type=Path, help="the README to check (default: the root's)")
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    p.add_argument("--fresh-clone", action="store_true",
                   help="clone the root's HEAD and set it up first, then run there")  # fmt: skip
    p.add_argument("--seed", type=int, help="draws the order (default: from the clock)")
    p.add_argument("--jobs", type=int, default=2, help="sections at once (default 2)")
    p.add_argument("--timeout-s", type=float, default=180.0,
                   help="time of one section (default 180)")  # fmt: skip
    p.add_argument("--port-wait-s", type=float, default=PORT_WAIT_S,
                   help=f"how long a section waits for a port another process holds "
                   f"(default {PORT_WAIT_S:g})")  # fmt: skip
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="run only sections whose title contains TEXT (repeatable)")  # fmt: skip
    p.add_argument("--list", action="store_true", help="list the sections and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.jobs < 1 or args.timeout_s <= 0:
        print("readme-check: --jobs must be >= 1 and --timeout-s > 0", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000
    checkout = args.root.resolve()
    readme = (args.readme or checkout / "README.md").resolve()
    sections = parse_readme(readme.read_text(encoding="utf-8"))
    if args.only:
        sections = [s for s in sections if any(o in s.title for o in args.only)]
        if not sections:
            print(f"readme-check: no section title contains {args.only}", file=sys.stderr)
            return 2
    if args.list:
        for s in sections:
            skipped = f", {len(s.skipped)} not run" if s.skipped else ""
            print(f"{readme.name}:{s.line}  {s.title}  ({len(s.blocks)} blocks{skipped})")
        return 0
    random.Random(seed).shuffle(sections)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="readme-check-") as tmp, _one_check_at_a_time():
        root = _fresh_clone(checkout, Path(tmp)) if args.fresh_clone else checkout
        env = _environment(root)
        print(f"readme-check: {len(sections)} sections of {readme}, seed {seed} "
              f"(replay: --seed {seed}), {args.jobs} at once",
              file=sys.stderr, flush=True)  # fmt: skip

        def one(section: Section) -> Outcome:
            outcome = run_section(section, root, env, args.timeout_s, args.port_wait_s)
            verdict = "PASS" if outcome.ok else "FAIL"
            first = outcome.detail.splitlines()[0] if outcome.detail else ""
            print(f"{verdict} {outcome.seconds:6.1f} s  {readme.name}:{section.line}  "
                  f"{section.title}" + (f"  ({first})" if outcome.ok and first else ""),
                  flush=True)  # fmt: skip
            if not outcome.ok:
                print("  " + outcome.detail.replace("\n", "\n  "), flush=True)
            return outcome

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(one, sections))
    failed = [o for o in outcomes if not o.ok]
    print(f"readme-check: {len(outcomes) - len(failed)} of {len(outcomes)} sections passed "
          f"in {time.monotonic() - started:.0f} s (seed {seed})", flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
