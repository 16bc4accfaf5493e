"""What `ccr-admin describe-link` prints under its table for a partition that
is not copied: a partition held for the follower's own writes says so and
names `recover`, not as one more refusal."""

from __future__ import annotations

from typing import Any

from admin.cli import partition_problem_lines


def _row(partition: int, problem: str, held: bool) -> dict[str, Any]:
    return {"topic": "orders-r", "partition": partition, "problem": problem,
            "own_writes_held": held}  # fmt: skip


def test_a_held_partition__says_held_and_names_recover__a_refused_one_says_not_copied() -> None:
    lines = partition_problem_lines(
        [
            _row(0, "", False),
            _row(1, "DIVERGED_LOG: offsets [10, 15) are this cluster's own writes", True),
            _row(2, "STORAGE_REFUSED: file too large", False),
        ]
    )

    assert lines == [
        "held for its own writes: orders-r-1 keeps records this cluster's clients wrote; "
        "it is not copied until `recover` cuts them (the cut is shown first and needs "
        "--confirm): DIVERGED_LOG: offsets [10, 15) are this cluster's own writes",
        "not copied: orders-r-2: STORAGE_REFUSED: file too large",
    ]
