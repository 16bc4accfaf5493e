"""`python -m linkd` runs the daemon (same as the `linkd` command)."""

from __future__ import annotations

import sys


def run() -> int:
    # kio (the Kafka protocol's schema) registers its types with Hypothesis
    # whenever Hypothesis can be imported, which costs every daemon start a
    # third of a second where the test tools are installed; a daemon never
    # draws test data, so the import is refused here (a None entry makes
    # `import hypothesis` raise ImportError, which kio expects), in the
    # daemon's own process only.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from linkd.main import main

    return main()


if __name__ == "__main__":
    raise SystemExit(run())
