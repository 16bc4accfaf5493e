"""scripts/failed_tests.py: the test script's last lines name the failed tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3" failures="1" errors="1">
<testcase classname="tests.test_a" name="test_ok" time="0.1"/>
<testcase classname="tests.test_a" name="test_bad[x]" time="0.1">
<failure message="AssertionError: assert [1] == [2]&#10;second line">long diff</failure>
</testcase>
<testcase classname="tests.sub.test_b" name="test_setup" time="0.1">
<error message="failed on setup with &quot;OSError&quot;">trace</error>
</testcase>
</testsuite></testsuites>
"""


def test_names_each_failed_test_with_the_first_line_of_its_message(tmp_path: Path) -> None:
    report = tmp_path / "results.xml"
    report.write_text(REPORT)
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "failed_tests.py"), str(report)],
                          capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.splitlines() == [
        "== 2 test(s) failed or errored:",
        "FAILURE tests/test_a.py::test_bad[x]: AssertionError: assert [1] == [2]",
        'ERROR tests/sub/test_b.py::test_setup: failed on setup with "OSError"',
    ]
