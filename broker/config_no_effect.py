"""Apache Kafka broker configs that Shoal accepts at start-up and ignores, each with why.

Kafka's own ``config/server.properties`` and the usual share-group docker-compose setups carry
them, so a broker started from such a file starts; ``broker/config.py`` logs each one with its
reason and stores nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

# Real Apache Kafka broker configs that Shoal accepts at startup but ignores, each with the reason
# it has no effect (logged). They are the ones Kafka's config/server.properties and common
# docker-compose setups for share groups carry. A declared name never appears here
# (tests/unit/broker/test_config.py checks), and nothing here can be changed at runtime.
NO_EFFECT_KAFKA_CONFIGS: Mapping[str, str] = {
    # KRaft: Shoal is one process with no controller quorum.
    "process.roles": "Shoal is a single process with no KRaft controller",
    "controller.quorum.voters": "Shoal has no KRaft controller quorum",
    "controller.quorum.bootstrap.servers": "Shoal has no KRaft controller quorum",
    "controller.listener.names": "Shoal has no controller listener",
    # Threads and sockets: one asyncio event loop, OS default socket buffers.
    "num.network.threads": "Shoal serves all connections on one event loop",
    "num.io.threads": "Shoal serves all requests on one event loop",
    "num.recovery.threads.per.data.dir": "logs are opened and recovered one at a time",
    "socket.send.buffer.bytes": "Shoal uses the OS default socket buffers",
    "socket.receive.buffer.bytes": "Shoal uses the OS default socket buffers",
    # The internal topics follow min.insync.replicas like any topic.
    "transaction.state.log.min.isr": "internal topics follow min.insync.replicas",
    "share.coordinator.state.topic.min.isr": "internal topics follow min.insync.replicas",
    # Switches that turn share groups on in Kafka 4.0-4.2; Shoal always serves them.
    "group.coordinator.rebalance.protocols": "Shoal always serves the classic, consumer and "
                                             "share protocols",
    "group.share.enable": "share groups are always enabled in Shoal",
    "unstable.api.versions.enable": "Shoal advertises only the API versions it serves",
    # The log cleaner: one thread, no I/O throttle.
    "log.cleaner.threads": "Shoal runs one cleaner thread",
    "log.cleaner.io.max.bytes.per.second": "Shoal's cleaner is not throttled",
    "log.cleaner.io.buffer.size": "Shoal's cleaner sizes its read buffers itself",
    "log.cleaner.io.buffer.load.factor": "Shoal's key map is bounded by "
                                         "log.cleaner.dedupe.buffer.size alone",
    # Classic consumer groups and Kafka internals Shoal does not have.
    "group.share.persister.class.name": "Shoal's share-state persister is built in",
    "broker.id": "Shoal reports node.id as its broker id; set node.id instead",
}
