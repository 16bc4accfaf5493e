"""MirrorMaker 2's MirrorCheckpointTask for one simulated flow, and its
KIP-545 group offset sync, on virtual time (split from `sim/mirror_driver.py`,
whose MirrorDriver is the flow's source task and owns the calls, the network
and the clusters).

Each round reads the source's committed offsets of the groups the flow
replicates and the offset syncs written so far, translates them with the
core's rules (`linkd.core.mirror.checkpoint`) and writes the checkpoints to
the target; the group sync then writes translated offsets into groups that
are not active on the target, never rewinding them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkd.core import records as rb
from linkd.core.errors import ClusterError
from linkd.core.mirror.checkpoint import (
    CheckpointTracker,
    TargetGroup,
    TargetGroupState,
    checkpoints_for_flow,
    plan_group_offset_sync,
)
from linkd.core.mirror.model import Checkpoint, OffsetAndMetadata, OffsetSync, TopicPartition
from linkd.core.mirror.sync_store import OffsetSyncStore
from linkd.core.mirror.wire import encode_checkpoint
from sim.link_service import CONTROL_MESSAGE_BYTES, PER_PARTITION_BYTES

if TYPE_CHECKING:
    from sim.mirror_driver import MirrorDriver, Reply

INTERNAL_RECORD_BYTES = 64  # logical size of an offset sync or checkpoint record


class CheckpointTask:
    """The checkpoints and the group offset sync of one flow."""

    def __init__(self, driver: MirrorDriver) -> None:
        self.driver = driver
        self.store = OffsetSyncStore()
        self.tracker = CheckpointTracker()
        self.syncs_read_to = 0  # next offset of the offset-syncs topic to read
        self._checkpointing = False

    def checkpoint_tick(self) -> None:
        d = self.driver
        if d.stopped:
            return
        d.queue.after(
            d.flow.emit_checkpoints_interval_ms,
            f"mirror {d.name} checkpoints",
            self.checkpoint_tick,
        )
        if self._checkpointing:
            return  # the previous round is still out
        self._checkpointing = True
        syncs_on_source = d.syncs_cluster is d.source
        read_from = self.syncs_read_to

        def serve(reply: Reply) -> None:
            state = d.source.state
            groups: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
            for group, _state, _protocol in state.groups.list_groups():
                if not d.flow.group_filter.should_replicate_group(group):
                    continue
                offsets = {
                    TopicPartition(t, p): OffsetAndMetadata(c.offset, c.metadata)
                    for (t, p), c in state.groups.committed(group, None).items()
                }
                if offsets:
                    groups[group] = offsets
            syncs: list[OffsetSync] = []
            end = read_from
            if syncs_on_source:
                syncs, end = d.read_syncs(d.source, read_from)
            size = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * (
                len(syncs) + sum(len(o) for o in groups.values())
            )
            reply(lambda: self._apply_checkpoint_round(groups, syncs, end), size)

        d.call(d.source, "checkpoint round", CONTROL_MESSAGE_BYTES, serve, self._round_over)

    def _round_over(self) -> None:
        self._checkpointing = False

    def _apply_checkpoint_round(
        self,
        groups: dict[str, dict[TopicPartition, OffsetAndMetadata]],
        syncs: list[OffsetSync],
        end: int,
    ) -> None:
        d = self.driver
        if d.syncs_cluster is d.target:
            if not d.target.up:
                self._round_over()
                return
            syncs, end = d.read_syncs(d.target, self.syncs_read_to)
        self.store.handle_syncs(syncs)
        self.syncs_read_to = end
        if not self.store.read_to_end:
            self.store.mark_read_to_end()  # this read reached the topic's end
        flow = d.flow
        new = checkpoints_for_flow(flow, groups, groups.__getitem__, self.store, self.tracker)
        if not new:
            self._round_over()
            return
        count = sum(len(c) for c in new.values())

        def serve(reply: Reply) -> None:
            node = d.target
            now = d.queue.now_ms
            d.ensure_topic(node, d.checkpoints_topic)
            specs = [
                rb.RecordSpec(*encode_checkpoint(cp), now)
                for group in sorted(new)
                for _tp, cp in sorted(new[group].items())
            ]
            result = node.state.produce(d.checkpoints_topic, 0, rb.build_batch(specs), "", now)
            topic = d.checkpoints_topic
            targets = {(topic, 0): node.state.partition(topic, 0).log_end_offset}

            def answered(timed_out: ClusterError | None) -> None:
                if timed_out is None:
                    reply(lambda: self._checkpoints_written(new), CONTROL_MESSAGE_BYTES)
                else:
                    reply(self._round_over, CONTROL_MESSAGE_BYTES)

            node.execute(
                result.effects,
                "mirror_internal",
                d.internal_bytes,
                lambda: node.wait_high_watermarks(targets, "checkpoints", answered),
            )

        size = CONTROL_MESSAGE_BYTES + INTERNAL_RECORD_BYTES * count
        d.call(d.target, "checkpoints", size, serve, self._round_over)

    def _checkpoints_written(self, new: dict[str, dict[TopicPartition, Checkpoint]]) -> None:
        d = self.driver
        for group in sorted(new):
            self.tracker.update(group, new[group])
            d.stats.checkpoints_emitted += len(new[group])
        self._round_over()

    def group_sync_tick(self) -> None:
        d = self.driver
        if d.stopped:
            return
        d.queue.after(
            d.flow.sync_group_offsets_interval_ms,
            f"mirror {d.name} group sync",
            self.group_sync_tick,
        )
        converted = self.tracker.converted_upstream_offsets()
        if not converted:
            return

        def serve(reply: Reply) -> None:
            state = d.target.state
            known = {g for g, _s, _p in state.groups.list_groups()}
            target_groups: dict[str, TargetGroup] = {}
            for group in sorted(converted):
                if group not in known:
                    target_groups[group] = TargetGroup(TargetGroupState.DEAD)
                elif state.groups.is_active(group):
                    target_groups[group] = TargetGroup(TargetGroupState.ACTIVE)
                else:
                    current = {
                        TopicPartition(t, p): OffsetAndMetadata(c.offset, c.metadata)
                        for (t, p), c in state.groups.committed(group, None).items()
                    }
                    target_groups[group] = TargetGroup(TargetGroupState.EMPTY, current)
            plan = plan_group_offset_sync(converted, target_groups)
            written = 0
            for group, offsets in sorted(plan.writes.items()):
                try:
                    effects = state.commit_group_offsets(
                        group,
                        -1,
                        "",
                        {
                            (tp.topic, tp.partition): (o.offset, o.metadata, -1)
                            for tp, o in sorted(offsets.items())
                        },
                        d.queue.now_ms,
                    )
                except ClusterError as exc:
                    d.queue.note(
                        f"mirror {d.name} group {group} offsets refused: {exc.code.name}"
                    )
                    continue
                d.target.execute(effects, "offsets", d.observer.logical_bytes)
                written += len(offsets)
            d.stats.group_sync_done(plan, written)
            reply(lambda: None, CONTROL_MESSAGE_BYTES)

        d.call(d.target, "group sync", CONTROL_MESSAGE_BYTES, serve, lambda: None)


__all__ = ["CheckpointTask"]
