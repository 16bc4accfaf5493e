"""Prints the tests that failed in a pytest JUnit XML report, one short line
each, so that the end of a long test log names them (pytest's own summary
prints each failure's whole assertion diff, which on CI can run to
thousands of lines).

    python scripts/failed_tests.py RESULTS.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

MESSAGE_CHARS = 160


def failed(report: Path) -> list[str]:
    """One line per failed or erroring test: its node id and the first line of its message."""
    lines: list[str] = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            where = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            message = (found.get("message") or "").strip().splitlines()
            first = message[0][:MESSAGE_CHARS] if message else ""
            lines.append(f"{outcome.upper()} {where}: {first}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    report = Path(argv[0])
    if not report.exists():
        print(f"no test report at {report}", file=sys.stderr)
        return 1
    lines = failed(report)
    print(f"== {len(lines)} test(s) failed or errored:" if lines else "== no failed tests")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
