"""docs/operations.md's table of topic configs names every config the core
accepts, with its default."""

from __future__ import annotations

import re

from linkd.core.topic_config import CONFIG_KEYS
from tests.harness import ROOT


def test_the_topic_config_table_matches_the_code() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Topic configs", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z.]+)` \| (\S+) \|", section, re.MULTILINE))
    assert rows == {k.name: k.default for k in CONFIG_KEYS.values()}
