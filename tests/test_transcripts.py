"""The transcripts of tests/transcripts/, replayed by the simulator's shell
and by the daemon's (tests/transcript.py says how they are written)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.transcript import DaemonShell, Shell, SimShell, Transcript, parse, render

HERE = Path(__file__).parent / "transcripts"
FILES = sorted(HERE.glob("*.txt"))
SHELLS: dict[str, Callable[[str], Shell]] = {"sim": SimShell, "daemon": DaemonShell}


def replay(text: str, shell: str) -> str:
    """The transcript as this shell writes it (comments kept at the top)."""
    steps = parse(text)
    transcript = Transcript(SHELLS[shell])
    try:
        outputs = [transcript.run(step.command) for step in steps]
    finally:
        transcript.close()
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    return header + ("\n" if header else "") + render(steps, outputs)


def differences(text: str, shell: str, name: str) -> str:
    """A unified diff of what the shell wrote against `text`; "" if none."""
    actual = replay(text, shell)
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            f"{name} (expected)",
            f"{name} ({shell} shell)",
        )
    )


@pytest.mark.parametrize("shell", sorted(SHELLS))
@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_transcript(path: Path, shell: str) -> None:
    text = path.read_text()
    if os.environ.get("CCR_TRANSCRIPT_REWRITE") and shell == "sim":
        path.write_text(replay(text, shell))
        return
    diff = differences(text, shell, path.name)
    assert not diff, f"the {shell} shell's output differs:\n{diff}"


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_a_transcript_expecting_something_else__fails_naming_the_line(shell: str) -> None:
    text = FILES[0].read_text()
    planted = text.replace("link ab on B: FOLLOWING", "link ab on B: IN_SYNC", 1)
    assert planted != text
    diff = differences(planted, shell, "planted.txt")
    assert "-link ab on B: IN_SYNC" in diff and "+link ab on B: FOLLOWING" in diff


def test_parse__a_command_without_its_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="line 1: 'fetch' is not followed by ----"):
        parse("fetch\nshow B\n")
