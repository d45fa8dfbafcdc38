"""``TopicsImage``: the topic metadata the group coordinator's shards read (names, ids,
partition counts), as an immutable snapshot the shell builds and hands to each op; shared by
every group kind (share and consumer assignors, regex subscriptions, describe answers).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """What the group coordinator needs to know about one topic."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class TopicsImage:
    """A snapshot of cluster topic metadata: topic name -> TopicInfo.

    The shell builds one from its metadata (e.g. after CreateTopics/DeleteTopics/CreatePartitions)
    and hands it to the shard; the shard never asks for metadata itself.
    """

    by_name: Mapping[str, TopicInfo] = field(default_factory=dict)

    @classmethod
    def of(cls, topics: Mapping[str, tuple[uuid.UUID, int]]) -> TopicsImage:
        """Build from ``{name: (topic_id, partition_count)}``."""
        return cls({n: TopicInfo(tid, n, count) for n, (tid, count) in topics.items()})

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._ids.get(topic_id)

    def ids(self) -> Mapping[uuid.UUID, TopicInfo]:
        """Topic id -> TopicInfo (computed once per image)."""
        return self._ids

    @cached_property
    def _ids(self) -> dict[uuid.UUID, TopicInfo]:
        return {info.topic_id: info for info in self.by_name.values()}

    def metadata_hash(self, topic_names: Iterable[str]) -> int:
        """A stable signed 64-bit hash of the named topics' (name, id, partition count).

        Stored in ShareGroupMetadataValue.MetadataHash so a change in any subscribed topic
        (creation, deletion, re-creation, partition growth) is noticed as a changed hash, like
        Kafka's group metadata hash (KIP-1101). The value is ours: only equality matters, it is
        never compared with hashes computed by Apache Kafka. 0 means "no subscribed topic exists".
        """
        parts = []
        for name in sorted(set(topic_names)):
            info = self.by_name.get(name)
            if info is not None:
                parts.append(f"{name}\x00{info.topic_id}\x00{info.num_partitions}")
        if not parts:
            return 0
        digest = hashlib.blake2b("\x01".join(parts).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)
