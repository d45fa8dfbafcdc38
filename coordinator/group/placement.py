"""Which ``__consumer_offsets`` partition coordinates a group.

Kafka's rule (``GroupCoordinatorService.partitionFor``, the same for every group type):
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` with Java's ``String.hashCode``
(``Utils.abs`` maps Integer.MIN_VALUE to 0). The partition count is the topic's actual count, so
changing ``offsets.topic.num.partitions`` after the topic exists moves nothing. Pure: no I/O.
"""

from __future__ import annotations

from coordinator.share.service import java_string_hash

# offsets.topic.num.partitions default.
DEFAULT_NUM_PARTITIONS = 50


def partition_for_group(group_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``.

    Raises:
        ValueError: ``num_partitions`` is not positive.
    """
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
