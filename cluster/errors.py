"""The cluster-metadata errors, importable without the etcd client (the ``cluster`` extra):
the broker's command line reports them whether or not cluster mode could even start."""

from __future__ import annotations

__all__ = ["ClusterIdMismatchError", "ClusterStoreError", "DuplicateNodeIdError",
           "ProducerIdsUnavailable", "TooManyChangesError"]


class ClusterStoreError(Exception):
    """A cluster-metadata operation failed; ``str()`` tells the operator what and what to do."""


class DuplicateNodeIdError(ClusterStoreError):
    """Another live broker is registered with this node id."""


class ClusterIdMismatchError(ClusterStoreError):
    """The broker's data directory belongs to another cluster than the one in etcd."""


class TooManyChangesError(ClusterStoreError):
    """One request would change more keys than one etcd transaction may hold; nothing was
    sent to etcd."""


class ProducerIdsUnavailable(Exception):
    """This broker's producer-id block ran out before etcd granted the next (retriable)."""
