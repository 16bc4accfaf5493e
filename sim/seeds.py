"""Seeds: one run seed, split into one independent stream per subsystem.

Rules:
- Nothing in the simulator draws from global `random`, the wall clock,
  `uuid4()` or the iteration order of sets of strings. Every random choice
  comes from a `random.Random` made here.
- A subsystem's stream depends only on the run seed and the subsystem's name
  (sha256 of both), so adding draws in one subsystem (say, more network jitter)
  never shifts the draws of another (say, which key a producer picks).
- Identifiers that need entropy (link ids, topic ids) are drawn from the
  `ids` stream and formatted as UUIDs: they look like random ones and stay
  reproducible.
"""

from __future__ import annotations

import hashlib
import random
import uuid


def derive_seed(seed: int, *names: str) -> int:
    """A 64-bit seed for the stream named `names` of run `seed`."""
    text = ":".join([str(seed), *names]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def stream(seed: int, *names: str) -> random.Random:
    return random.Random(derive_seed(seed, *names))


class IdFactory:
    """Reproducible UUID strings (never uuid4: a run must replay)."""

    def __init__(self, seed: int, name: str) -> None:
        self._rng = stream(seed, "ids", name)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
