"""Moved to ``client/admin_wire.py`` (issue 14: one client library with an admin part); this
name stays so existing imports keep working."""

from client.admin_wire import (  # noqa: F401
    API_NAMES,
    CLIENT_ID,
    CLIENT_VERSIONS,
    CliError,
    Cluster,
    Connection,
    Node,
    TopicMetadata,
    error_text,
    parse_address,
)
