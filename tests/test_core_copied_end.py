"""Where a follower's log stops holding its source's records
(`histories.copied_end`): a failover resumes a replicated group no further
(fix 41), since past it the source's offsets name other records."""

from __future__ import annotations

from linkd.core.histories import PartitionSide, copied_end
from linkd.core.provenance import ProvenanceItem


def side(hw: int, *entries: ProvenanceItem) -> PartitionSide:
    return PartitionSide("B", 0, hw, hw, ((0, 0),), tuple(entries))


START = ProvenanceItem.attached(0, "A", "link-1", 1)


def test_a_copy_throughout_ends_at_its_high_watermark() -> None:
    assert copied_end(side(70, START)) == 70


def test_own_writes_since_a_detach_are_not_the_sources() -> None:
    assert copied_end(side(70, START, ProvenanceItem.detached(51, "link-1"))) == 51


def test_the_bound_is_never_above_the_high_watermark() -> None:
    assert copied_end(side(40, START, ProvenanceItem.detached(51, "link-1"))) == 40


def test_following_again_after_the_detach_copies_to_the_end() -> None:
    again = ProvenanceItem.attached(60, "A", "link-1", 2)
    assert copied_end(side(80, START, ProvenanceItem.detached(51, "link-1"), again)) == 80


def test_a_log_no_link_copied_into_says_nothing() -> None:
    assert copied_end(side(70)) == 70
