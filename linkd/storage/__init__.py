"""Durable embedded storage of one linkd: partition logs, metadata journal, data dir.

- segments: one partition's record batches in Kafka-style segment files.
- metadata: the cluster metadata as a journal of JSON records plus snapshots.
- datadir: the locked data directory that holds both, owned by one cluster.

Pure file I/O, no threads of its own; the rules of each part are in its module docstring.
"""

from linkd.storage.datadir import DataDir, DataDirError
from linkd.storage.metadata import CorruptMetadataError, JournalRecoveryReport, MetadataJournal
from linkd.storage.segments import PartitionLogStore, RecoveryReport

__all__ = [
    "CorruptMetadataError",
    "DataDir",
    "DataDirError",
    "JournalRecoveryReport",
    "MetadataJournal",
    "PartitionLogStore",
    "RecoveryReport",
]
