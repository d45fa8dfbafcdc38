"""DescribeLogDirs (35) v1-4: the broker's log directory and the partitions in it (what
``kafka-log-dirs --describe`` and ``Admin.describeLogDirs`` show).

Shoal has one log directory, the data directory. The answer is one result for it: its absolute
path; per partition asked (``Topics`` null: every partition with a log) that has a log here, the
size of its segments in bytes, offset lag 0 (a single copy is never behind itself; Kafka
reports 0 for a current log that is caught up) and ``IsFutureKey`` false (Shoal has no
AlterReplicaLogDirs); and (v4) the total and usable bytes of the volume it is on. Partitions
asked for that have no log here are left out, as Kafka does. While the directory is offline
after a storage error (``storage/log_dir.py``) the result is KAFKA_STORAGE_ERROR with no
topics; the volume figures are -1 when they cannot be read. v0 was removed in Kafka 4.0.

Authorization (``broker/authz.py``), as Kafka: DESCRIBE on the CLUSTER, else the response's
error is CLUSTER_AUTHORIZATION_FAILED (v3+; the error field is new in v3) with no results.

Bounds: the partitions listed are at most the broker's (one lookup per name asked, which the
request size bounds); a response over ``YIELD_EVERY`` partitions is encoded off the event loop.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from broker.wire_limits import YIELD_EVERY, EncodeOffLoop
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import DescribeLogDirsRequest

API_KEY = 35
VERSIONS = (1, 4)


def _volume(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the volume holding ``path``; (-1, -1) if it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _wanted(ctx: RequestContext, req: DescribeLogDirsRequest) -> list[tuple[str, int]]:
    logs = ctx.broker.logs
    if req.topics is None:
        return sorted(tp for tp, _ in logs.items())
    asked = {(t.topic, int(p)) for t in req.topics for p in t.partitions}
    return sorted(tp for tp in asked if logs.get(*tp) is not None)


def handle(ctx: RequestContext, req: DescribeLogDirsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not ctx.authorized(Operation.DESCRIBE, CLUSTER):
        return make(m.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    logs = ctx.broker.logs
    path = str(logs.log_dir.path.resolve())
    total, usable = _volume(path)
    if logs.log_dir.offline:
        result = make(m.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                      log_dir=path, topics=(), total_bytes=total, usable_bytes=usable)
        return make(m.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, results=(result,))
    by_topic: dict[str, list[Any]] = {}
    wanted = _wanted(ctx, req)
    for topic, p in wanted:
        lg = logs.get(topic, p)
        if lg is None:
            continue
        by_topic.setdefault(topic, []).append(m.DescribeLogDirsPartition(
            partition_index=p, partition_size=lg.size_bytes, offset_lag=0, is_future_key=False))
    topics = tuple(m.DescribeLogDirsTopic(name=t, partitions=tuple(ps))
                   for t, ps in by_topic.items())
    result = make(m.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path,
                  topics=topics, total_bytes=total, usable_bytes=usable)
    resp = make(m.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results=(result,))
    return EncodeOffLoop(resp) if len(wanted) > YIELD_EVERY else resp
