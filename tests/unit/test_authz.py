"""broker/authz.py: the default authorizer refuses CLUSTER_ACTION to everyone but super.users."""

from __future__ import annotations

import pytest

from broker.authz import (
    ANONYMOUS,
    CLUSTER,
    DefaultAuthorizer,
    Operation,
    Principal,
    Resource,
    ResourceType,
    parse_super_users,
)
from broker.config import BrokerConfig, ConfigError

TOPIC = Resource(ResourceType.TOPIC, "t")


def test_anonymous_clients_may_do_anything_but_cluster_actions() -> None:
    a = DefaultAuthorizer()
    assert not a.authorize(ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)
    assert a.authorize(ANONYMOUS, Operation.READ, TOPIC)
    assert a.authorize(ANONYMOUS, Operation.DESCRIBE, CLUSTER)


def test_super_users_may_act_as_the_cluster() -> None:
    a = DefaultAuthorizer(parse_super_users("User:broker; User:ANONYMOUS"))
    assert a.authorize(ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)
    assert a.authorize(Principal("User", "broker"), Operation.CLUSTER_ACTION, CLUSTER)
    assert not DefaultAuthorizer(parse_super_users("User:broker")).authorize(
        ANONYMOUS, Operation.CLUSTER_ACTION, CLUSTER)


def test_super_users_config_is_empty_by_default_and_validated() -> None:
    assert BrokerConfig().get("super.users") == ""
    assert BrokerConfig({"super.users": "User:a;User:b"}).get("super.users") == "User:a;User:b"
    with pytest.raises(ValueError):
        parse_super_users("ANONYMOUS")
    with pytest.raises(ConfigError, match="Type:name"):
        BrokerConfig({"super.users": "nobody"})
