"""Mirror links: MirrorMaker 2 flows hosted by the daemon of their target cluster.

A mirror link is the second link type. It is stored on ONE cluster, the target
of its flows, as the `mm2.properties` text it was created from, the alias this
cluster has in that file, and its creation and deletion times. The daemon runs
the MM2 engine for it (linkd/mirror_links.py); this module holds the table and
decides what a text means for this cluster:

- The text is parsed by `parse_mm2_properties`; an invalid value refuses the
  link (INVALID_LINK_CONFIG naming key, line and value), nothing is stored.
- The alias must be one of the file's clusters, and at least one enabled flow
  must target it; otherwise the link is refused, naming the enabled flows.
- The link hosts every pair of the file whose target is the alias: the enabled
  ones replicate, the others only emit heartbeats (MM2's clusterPairs). Enabled
  flows that target another alias are reported as not hosted here: their
  target's daemon hosts them (one link per target, from the same file).
- Records: `mirror_link_create` and `mirror_link_delete` (journal), replayed by
  `apply_record`; `snapshot` / `restore` hold the same table. A deleted link
  stays as a tombstone (its deletion time) until the name is created again;
  only the newest `MAX_TOMBSTONES` tombstones are kept.

Pure code: no I/O, clocks, threads or randomness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from linkd.core import journal as jr
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.mirror.config import MirrorConfigError, MirrorFlow, MirrorMakerConfig
from linkd.core.mirror.config import parse_mm2_properties as parse_mm2

__all__ = [
    "MAX_PROPERTIES_CHARS",
    "MAX_TOMBSTONES",
    "HostedMirror",
    "MirrorLink",
    "MirrorLinkTable",
    "hosted_mirror",
    "validate_name",
]

MAX_TOMBSTONES = 100
MirrorLinkRecord = jr.MirrorLinkCreate | jr.MirrorLinkDelete
MAX_PROPERTIES_CHARS = 1024 * 1024
_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True, slots=True)
class MirrorLink:
    name: str
    alias: str
    properties: str
    created_ms: int
    deleted_ms: int | None = None

    @property
    def live(self) -> bool:
        return self.deleted_ms is None

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "alias": self.alias,
            "properties": self.properties,
            "created_ms": self.created_ms,
            "deleted_ms": self.deleted_ms,
        }

    @staticmethod
    def of(d: dict[str, object]) -> MirrorLink:
        deleted = d.get("deleted_ms")
        return MirrorLink(
            str(d["name"]),
            str(d["alias"]),
            str(d["properties"]),
            jr.json_int(d["created_ms"]),
            None if deleted is None else jr.json_int(deleted),
        )


@dataclass(frozen=True, slots=True)
class HostedMirror:
    """What one cluster runs of an mm2.properties file."""

    alias: str
    # The file's configuration restricted to the pairs that target `alias`.
    config: MirrorMakerConfig
    # Enabled flows of the file that target other clusters ("A->C").
    not_hosted: tuple[str, ...]
    # The file's warnings, "line N: key: message".
    warnings: tuple[str, ...]

    @property
    def flows(self) -> tuple[MirrorFlow, ...]:
        return self.config.flows


def validate_name(name: str) -> None:
    if not _NAME_RE.fullmatch(name):
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"mirror link {name!r}",
            f"mirror link name {name!r} is invalid: use 1 to 249 letters, digits, "
            "'.', '_' or '-'",
        )


def hosted_mirror(name: str, properties: str, alias: str) -> HostedMirror:
    """Parses `properties` and keeps the pairs that target `alias`; refuses
    (INVALID_LINK_CONFIG) a text that is invalid or has no enabled flow into `alias`."""
    what = f"mirror link {name!r}"
    if not properties.strip():
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG, what, f"{what}: the mm2.properties text is empty"
        )
    if len(properties) > MAX_PROPERTIES_CHARS:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            what,
            f"{what}: the mm2.properties text has {len(properties)} characters, "
            f"more than the {MAX_PROPERTIES_CHARS} allowed",
        )
    try:
        config = parse_mm2(properties)
    except MirrorConfigError as exc:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG, what, f"{what}: invalid mm2.properties: {exc}"
        ) from exc
    aliases = [c.alias for c in config.clusters]
    if alias not in aliases:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            what,
            f"{what}: this cluster's alias {alias!r} is not one of the file's clusters "
            f"({', '.join(aliases)}); name the alias this cluster has in the file",
        )
    enabled = [f.name for f in config.enabled_flows()]
    if not any(f.target == alias for f in config.enabled_flows()):
        listed = ", ".join(enabled) if enabled else "none"
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            what,
            f"{what}: no enabled flow of the file targets {alias!r} (enabled flows: "
            f"{listed}); a mirror link runs on the daemon of its target cluster, so create "
            f"it there, or enable a flow into {alias!r} (e.g. 'SOURCE->{alias}.enabled = true')",
        )
    hosted = replace(config, flows=tuple(f for f in config.flows if f.target == alias))
    return HostedMirror(
        alias,
        hosted,
        tuple(f.name for f in config.enabled_flows() if f.target != alias),
        tuple(str(w) for w in config.warnings),
    )


class MirrorLinkTable:
    """The mirror links stored on this cluster, live ones and tombstones."""

    def __init__(self) -> None:
        self.links: dict[str, MirrorLink] = {}

    def names(self) -> list[str]:
        return sorted(n for n, link in self.links.items() if link.live)

    def live(self) -> list[MirrorLink]:
        return [self.links[n] for n in self.names()]

    def all(self) -> list[MirrorLink]:
        return [self.links[n] for n in sorted(self.links)]

    def get(self, name: str) -> MirrorLink:
        link = self.links.get(name)
        if link is None or not link.live:
            gone = "" if link is None else f" (deleted at {link.deleted_ms} ms)"
            raise ClusterError(
                ErrorCode.UNKNOWN_LINK,
                f"mirror link {name!r}",
                f"mirror link {name!r} does not exist{gone}",
            )
        return link

    def create(
        self, cluster_id: str, name: str, alias: str, properties: str, now_ms: int
    ) -> tuple[HostedMirror, list[MirrorLinkRecord]]:
        """Validates; returns what this cluster hosts and the records to journal
        (applied here already)."""
        validate_name(name)
        existing = self.links.get(name)
        if existing is not None and existing.live:
            raise ClusterError(
                ErrorCode.LINK_EXISTS,
                f"mirror link {name!r}",
                f"mirror link {name!r} already exists on cluster {cluster_id!r} "
                f"(created at {existing.created_ms} ms); delete it first",
            )
        hosted = hosted_mirror(name, properties, alias)
        record = jr.MirrorLinkCreate(name, alias, properties, now_ms)
        self.apply_record(record)
        return hosted, [record]

    def delete(self, name: str, now_ms: int) -> list[MirrorLinkRecord]:
        self.get(name)
        record = jr.MirrorLinkDelete(name, now_ms)
        self.apply_record(record)
        return [record]

    def hosted(self, name: str) -> HostedMirror:
        """What a stored link hosts (its text was valid when it was stored)."""
        link = self.get(name)
        return hosted_mirror(name, link.properties, link.alias)

    # -- durability ------------------------------------------------------------------

    def apply_record(self, record: MirrorLinkRecord) -> None:
        if isinstance(record, jr.MirrorLinkCreate):
            self.links[record.name] = MirrorLink(
                record.name, record.alias, record.properties, record.created_ms, record.deleted_ms
            )
        else:
            link = self.links.get(record.name)
            if link is not None and link.live:
                self.links[link.name] = replace(link, deleted_ms=record.deleted_ms)
                self._trim_tombstones()

    def _trim_tombstones(self) -> None:
        dead = sorted(
            (link for link in self.links.values() if not link.live),
            key=lambda link: (link.deleted_ms or 0, link.name),
        )
        for link in dead[: max(0, len(dead) - MAX_TOMBSTONES)]:
            del self.links[link.name]

    def snapshot(self) -> list[dict[str, object]]:
        return [link.as_dict() for link in self.all()]

    def restore(self, snapshot: list[object]) -> None:
        read = [MirrorLink.of(jr.json_object(d)) for d in snapshot]
        self.links = {link.name: link for link in read}
