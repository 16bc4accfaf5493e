"""docs/operations.md's table of topic configs names every config the core
accepts, with its default, whether it takes effect here, and whether it stays
on its cluster (not copied to a link's followers)."""

from __future__ import annotations

import re

from linkd.core.topic_config import CLUSTER_LOCAL_KEYS, CONFIG_KEYS, Effect
from tests.harness import ROOT


def _shown_default(default: str | None) -> str:
    if default is None:
        return "(none)"
    return '""' if default == "" else default


def test_the_topic_config_table_matches_the_code() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Topic configs", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9.]+)` \| (\S+) \| ([^|]+) \|", section, re.MULTILINE)
    assert {name: default for name, default, _ in rows} == {
        k.name: _shown_default(k.default) for k in CONFIG_KEYS.values()
    }
    for name, _default, here in rows:
        key = CONFIG_KEYS[name]
        applied = "applied" if key.effect is Effect.APPLIED else "no effect here"
        local = " (local)" if name in CLUSTER_LOCAL_KEYS else ""
        assert here.strip() == applied + local, name


def test_every_config_says_in_its_own_description_whether_it_takes_effect() -> None:
    """What DescribeConfigs' documentation field says of each key."""
    for key in CONFIG_KEYS.values():
        said = "no effect here" in key.doc
        assert said == (key.effect is Effect.STORED), key.name
