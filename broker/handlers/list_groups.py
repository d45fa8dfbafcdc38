"""ListGroups (16) v0-5: the groups this broker coordinates, share, classic and consumer.

Consumer-protocol (KIP-848) groups are listed with group type and protocol type ``consumer`` and
their state (Empty, Assigning, Reconciling, Stable).

Share groups are listed with protocol type ``share`` and, in v5, group type ``share`` (Kafka's
``kafka-groups.sh --list`` shows them as Share); classic groups with group type ``classic`` and
their protocol type (``consumer``, or empty for a group that only holds committed offsets). v4+ ``StatesFilter`` matches state names
case-insensitively; v5 ``TypesFilter`` matches group types case-insensitively (Kafka parses them
with ``Group.GroupType.parse``); empty filters match everything. While a ``__consumer_offsets``
partition is loading the answer is COORDINATOR_LOAD_IN_PROGRESS with no groups.

Authorization (``broker/authz.py``), as Kafka: a principal that may DESCRIBE the cluster sees
every group; any other sees only the groups it may DESCRIBE (asked quietly: filtering is not a
refusal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import CLUSTER, Operation, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE, OK
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ListGroupsRequest

API_KEY = 16
VERSIONS = (0, 5)


def handle(ctx: RequestContext, req: ListGroupsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if ctx.broker.share_groups.loading():
        # As Kafka: a coordinator partition still loading fails the whole listing.
        return make(m.ListGroupsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.coordinator_load_in_progress, groups=())
    states = tuple(getattr(req, "states_filter", ()) or ())
    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    listed = [g for g in ctx.broker.share_groups.list_groups(states or None)
              if not types or g.group_type.lower() in types]
    hidden: frozenset[str] = frozenset()
    if not ctx.authorized(Operation.DESCRIBE, CLUSTER, audit=False):
        hidden = ctx.denied(Operation.DESCRIBE, ResourceType.GROUP,
                            (g.group_id for g in listed), audit=False)
    groups = tuple(
        make(m.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type,
             group_state=g.state, group_type=g.group_type)
        for g in listed if g.group_id not in hidden)
    return make(m.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=OK, groups=groups)
