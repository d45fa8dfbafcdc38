"""API version negotiation (part of the client core, sans-IO).

A connection's first request is ApiVersions (v3); ``ApiVersions.from_response`` keeps the
broker's (min, max) per API key. ``pick`` then gives the highest version both sides speak for a
range this client can build, or raises ``UnsupportedVersionError`` (a ``KafkaError``) when the
ranges do not overlap; ``supports`` asks the same without raising.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from client.errors import UnsupportedVersionError, error_for
from protocol.codec import request_module

__all__ = ["API_NAMES", "API_VERSIONS", "ApiVersions", "api_name", "api_versions_request"]

API_VERSIONS = 18
API_VERSIONS_VERSION = 3

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs",
    36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups",
    44: "IncrementalAlterConfigs", 47: "OffsetDelete", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 69: "ConsumerGroupDescribe", 76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge",
    90: "DescribeShareGroupOffsets", 91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}


def api_name(api_key: int) -> str:
    """``Metadata`` for 3, ``API 99`` for a key this table does not name."""
    return API_NAMES.get(api_key, f"API {api_key}")


def api_versions_request(software_name: str, software_version: str) -> tuple[int, int, Any]:
    """The first request of every connection: ``(api_key, version, body)``."""
    m = request_module(API_VERSIONS, API_VERSIONS_VERSION)
    return API_VERSIONS, API_VERSIONS_VERSION, m.ApiVersionsRequest(
        client_software_name=software_name, client_software_version=software_version)


@dataclass(frozen=True, slots=True)
class ApiVersions:
    """The API version ranges one broker serves (empty before ApiVersions was answered)."""

    ranges: Mapping[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def from_response(cls, resp: Any) -> ApiVersions:
        """The ranges of an ApiVersions response.

        Raises:
            KafkaError: the response carries an error code.
        """
        err = error_for(resp.error_code)
        if err is not None:
            raise err
        return cls({int(k.api_key): (int(k.min_version), int(k.max_version))
                    for k in resp.api_keys})

    def supports(self, api_key: int, lo: int, hi: int) -> bool:
        """Whether the broker serves a version in ``lo..hi``."""
        theirs = self.ranges.get(api_key)
        return theirs is not None and theirs[1] >= lo and theirs[0] <= hi

    def pick(self, api_key: int, lo: int, hi: int, where: str = "the broker") -> int:
        """The highest version in ``lo..hi`` the broker also serves.

        Raises:
            UnsupportedVersionError: no overlap (the message names both ranges).
        """
        theirs = self.ranges.get(api_key)
        if theirs is None or theirs[1] < lo or theirs[0] > hi:
            raise UnsupportedVersionError(
                f"{where} supports api {api_key} versions {theirs}, this client needs {lo}-{hi}")
        return min(hi, theirs[1])
