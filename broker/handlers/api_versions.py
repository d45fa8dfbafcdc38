"""ApiVersions (18) v0-4: the versions we serve, straight from the dispatch table.

A request at a version above 4 gets the v0 response with UNSUPPORTED_VERSION (handled in the
connection, which cannot parse such a request; KIP-511). We also advertise the ``share.version``
feature as Kafka 4.4 does: supported levels 0-2 (level 2 adds share-group dead-letter topics,
KIP-1191), finalized at the broker config ``share.version`` (2 by default; 1 turns dead-letter
topics off, as a Kafka cluster finalized at level 1 has none). ``transaction.version`` is
advertised at level 2 (transaction protocol v2, KIP-890 part 2), finalized at 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.cluster_security import feature_level, features_epoch
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.app import Broker
    from broker.handlers._requests import ApiVersionsRequest

API_KEY = 18
VERSIONS = (0, 4)

# (name, lowest supported level, highest supported level, broker config holding the finalized
# level, or None: finalized at the highest). transaction.version 2: KIP-890 part 2 (EndTxn v5,
# Produce v12 adds partitions), Kafka 4.x's default.
_FEATURES = (("share.version", 0, 2, "share.version"), ("transaction.version", 0, 2, None))


def _response(broker: Broker, version: int, error: ErrorCode) -> Any:
    m = response_module(API_KEY, version)
    keys = tuple(m.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in broker.dispatcher.ranges())
    fields: dict[str, Any] = {"error_code": error, "api_keys": keys, "throttle_time": NO_THROTTLE}
    if version >= 3:
        fields["supported_features"] = tuple(
            m.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, lo, hi, _c in _FEATURES)
        fields["finalized_features_epoch"] = features_epoch(broker)
        fields["finalized_features"] = tuple(
            m.FinalizedFeatureKey(name=n, max_version_level=level, min_version_level=level)
            for n, level in ((n, hi if c is None else feature_level(broker, n,
                                                                    int(broker.config.get(c))))
                             for n, _lo, hi, c in _FEATURES))
    return make(m.ApiVersionsResponse, **fields)


def handle(ctx: RequestContext, req: ApiVersionsRequest) -> Any:
    return _response(ctx.broker, ctx.api_version, ErrorCode.none)


def unsupported_version_response(broker: Broker) -> Any:
    """The v0 response sent to an ApiVersions request of a version we do not know."""
    return _response(broker, 0, ErrorCode.unsupported_version)
