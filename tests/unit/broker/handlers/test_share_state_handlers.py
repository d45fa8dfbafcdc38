"""The five share-state handlers (83-87) as the network persister meets them on the coordinator's
broker, over the real share coordinator service: a key whose ``__share_group_state`` partition
this broker has not loaded answers NOT_COORDINATOR (the persister then looks for the new
leader), a loaded one answers, and a principal the authorizer refuses CLUSTER_ACTION gets
CLUSTER_AUTHORIZATION_FAILED on every entry with nothing written.

The request context is a stand-in carrying what the handlers read (the service, the version,
the principal and the authorizer's answer); the coordinator is real.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers import (
    delete_share_group_state,
    initialize_share_group_state,
    read_share_group_state,
    read_share_group_state_summary,
    write_share_group_state,
)
from coordinator.share.runtime_service import ShareCoordinatorService
from coordinator.share.service import partition_for_key
from persister.api import InitializeParams, ReadParams, SharePartitionKey
from protocol.codec import request_module
from tests.unit.coordinator.share.test_runtime_service import durable

TOPIC = uuid.UUID(int=0x5EED)
LOADED, ALL = 2, 5  # the broker holds partitions 0-1 of a 5-partition state topic


class Ctx:
    def __init__(self, svc: ShareCoordinatorService, version: int, allowed: bool) -> None:
        self.broker = SimpleNamespace(share_coordinator=svc)
        self.api_version = version
        self.principal = "User:alice"
        self._allowed = allowed

    def authorized(self, operation: Any, resource: Any, *, audit: bool = True) -> bool:
        return self._allowed


def _request(api: int, group: str, partitions: list[int]) -> Any:
    m = request_module(api, 0)
    name, topic_cls = {
        83: ("InitializeShareGroupStateRequest", "InitializeStateData"),
        84: ("ReadShareGroupStateRequest", "ReadStateData"),
        85: ("WriteShareGroupStateRequest", "WriteStateData"),
        86: ("DeleteShareGroupStateRequest", "DeleteStateData"),
        87: ("ReadShareGroupStateSummaryRequest", "ReadStateSummaryData"),
    }[api]
    fields = {83: dict(state_epoch=0, start_offset=0), 84: dict(leader_epoch=0),
              85: dict(state_epoch=0, leader_epoch=0, start_offset=0, state_batches=()),
              86: {}, 87: dict(leader_epoch=0)}[api]
    return getattr(m, name)(group_id=group, topics=(getattr(m, topic_cls)(
        topic_id=TOPIC, partitions=tuple(m.PartitionData(partition=p, **fields)
                                         for p in partitions)),))


HANDLERS = [initialize_share_group_state, read_share_group_state, write_share_group_state,
            delete_share_group_state, read_share_group_state_summary]


def _split(group: str) -> tuple[list[int], list[int]]:
    """Partitions of ``TOPIC`` whose keys the broker holds, and ones it does not."""
    held, other = [], []
    for p in range(40):
        (held if partition_for_key(SharePartitionKey(group, TOPIC, p), ALL) < LOADED
         else other).append(p)
    assert held and other
    return held, other


async def _codes(handler: Any, ctx: Ctx, group: str, partitions: list[int]) -> dict[int, ErrorCode]:
    resp = await handler.handle(ctx, _request(handler.API_KEY, group, partitions))
    (topic,) = resp.results
    return {p.partition: ErrorCode(p.error_code) for p in topic.partitions}


@pytest.mark.parametrize("handler", HANDLERS, ids=[h.__name__.rsplit(".", 1)[-1] for h in HANDLERS])
async def test_keys_of_unloaded_state_partitions_answer_not_coordinator(
        tmp_path: Path, handler: Any) -> None:
    held, other = _split("g")
    async with durable(tmp_path, partitions=LOADED) as svc:
        svc.num_partitions = ALL  # keys map to partitions this broker does not hold
        await svc.initialize_state([InitializeParams(SharePartitionKey("g", TOPIC, p), 0, 0)
                                    for p in held])
        codes = await _codes(handler, Ctx(svc, 0, allowed=True), "g", held[:3] + other[:3])
        assert {codes[p] for p in other[:3]} == {ErrorCode.not_coordinator}
        assert {codes[p] for p in held[:3]} == {ErrorCode.none}
        svc.num_partitions = LOADED


@pytest.mark.parametrize("handler", HANDLERS, ids=[h.__name__.rsplit(".", 1)[-1] for h in HANDLERS])
async def test_a_principal_refused_cluster_action_changes_nothing(
        tmp_path: Path, handler: Any) -> None:
    async with durable(tmp_path, partitions=LOADED) as svc:
        key = SharePartitionKey("g", TOPIC, 0)
        await svc.initialize_state([InitializeParams(key, 0, 7)])
        codes = await _codes(handler, Ctx(svc, 0, allowed=False), "g", [0, 1])
        assert codes == {0: ErrorCode.cluster_authorization_failed,
                         1: ErrorCode.cluster_authorization_failed}
        (summary,) = await svc.read_state_summary([ReadParams(key, 0)])
        assert (summary.error, summary.state_epoch, summary.start_offset) == (ErrorCode.none, 0, 7)
