"""Which request/response header version goes with an (api key, api version).

Kafka's rule (KIP-482): a request uses header v2 when its body version is flexible, else v1; a
response uses header v1 (with a tagged-field section) when flexible, else v0. The one exception is
ApiVersions, whose *response* always uses header v0 so that a client can parse it before it knows
which versions the broker supports.
"""

from __future__ import annotations

API_VERSIONS_KEY = 18


def response_header_version(api_key: int, flexible: bool) -> int:
    """Header version of a response to this API at a (flexible or not) body version."""
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if flexible else 0


def request_header_version(flexible: bool) -> int:
    """Header version of a request whose body version is (or is not) flexible."""
    return 2 if flexible else 1
