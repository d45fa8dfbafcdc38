"""The topic registry: names, stable topic IDs, partition counts and per-topic configs.

Kept in ``<data>/topics.json``, rewritten atomically (write a temp file, fsync, rename, fsync the
directory) on every change, so a crash leaves either the old or the new registry, never a torn one.
Durable before visible: every change is written first and applied in memory only once the write
succeeded, so a failed write (``OSError``) leaves the registry as it was, in memory and on disk
(issue 25). A change of many topics (DeleteTopics, AlterConfigs) is one write, not one per topic.
Topic IDs are UUIDs chosen at creation and never change, including across restarts.

Topic-name rules are Kafka's: 1-249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.
Names starting with ``__`` are internal (hidden from Metadata unless asked for by name).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

import errno
import json
import os
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage import fileops

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249

INTERNAL_TOPICS = ("__consumer_offsets", "__share_group_state", "__transaction_state")


class TopicError(Exception):
    """A topic operation that cannot be done; carries the Kafka error code and a message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message



def topic_name_problem(name: str | None) -> str | None:
    """Why a topic name is illegal, or None if it is fine."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return f"topic name {name!r} contains characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicRegistry:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "topics.json"
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        if self._path.exists():
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            for t in raw["topics"]:
                topic = Topic(t["name"], uuid.UUID(t["id"]), int(t["partitions"]),
                              dict(t.get("configs", {})))
                self._by_name[topic.name] = topic
                self._by_id[topic.topic_id] = topic

    def get(self, name: str | None) -> Topic | None:
        return self._by_name.get(name) if name is not None else None

    def by_id(self, topic_id: uuid.UUID | None) -> Topic | None:
        return self._by_id.get(topic_id) if topic_id is not None else None

    def all(self) -> list[Topic]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    def create(self, name: str, partitions: int, configs: dict[str, Any] | None = None) -> Topic:
        """Register a new topic; the caller checked the name is legal and unused."""
        return self.add(Topic(name, uuid.uuid4(), partitions, dict(configs or {})))

    def add(self, topic: Topic) -> Topic:
        """Register ``topic`` (name checked legal and unused by the caller) and save.

        Raises:
            OSError: ``topics.json`` could not be written; the topic is not registered.
        """
        assert topic.name not in self._by_name
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        try:
            self._save()
        except OSError:
            del self._by_name[topic.name], self._by_id[topic.topic_id]
            raise
        return topic

    def delete(self, name: str) -> Topic:
        return self.delete_many([name])[0]

    def delete_many(self, names: Collection[str]) -> list[Topic]:
        """Unregister registered topics ``names`` with one write; returns them.

        Raises:
            OSError: ``topics.json`` could not be written; every topic is still registered.
        """
        self._save(without=frozenset(names))
        gone = [self._by_name.pop(name) for name in names]
        for topic in gone:
            del self._by_id[topic.topic_id]
        return gone

    def set_partitions(self, name: str, count: int) -> None:
        """Raises:
            OSError: ``topics.json`` could not be written; the count is unchanged.
        """
        topic = self._by_name[name]
        old, topic.partitions = topic.partitions, count
        try:
            self._save()
        except OSError:
            topic.partitions = old
            raise

    def set_configs(self, name: str, configs: dict[str, Any]) -> None:
        self.set_configs_many({name: configs})

    def set_configs_many(self, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the configs of registered topics (name -> their new, validated configs) with
        one write, then make them visible.

        Raises:
            OSError: ``topics.json`` could not be written; no topic's configs changed.
        """
        self._save(configs=changes)
        for name, configs in changes.items():
            self._by_name[name].configs = dict(configs)

    def _save(self, configs: Mapping[str, Mapping[str, Any]] | None = None,
              without: frozenset[str] = frozenset()) -> None:
        """Write the registry as it is, with ``configs`` replacing those topics' configs and the
        topics ``without`` left out (neither is applied in memory here)."""
        configs = configs or {}
        doc = {"version": 1, "topics": [
            {"name": t.name, "id": str(t.topic_id), "partitions": t.partitions,
             "configs": dict(configs.get(t.name, t.configs))}
            for t in self.all() if t.name not in without
        ]}
        atomic_write(self._path, json.dumps(doc, indent=1, sort_keys=True).encode())


def atomic_write(path: Path, data: bytes) -> None:
    """Replace a file's contents so that a crash leaves the old or the new version.

    The writes and syncs go through ``storage.fileops`` (the seam tests fail like a full disk).

    Raises:
        OSError: the file could not be written; the old version is intact unless the rename
            went through and only the directory sync failed.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        done = 0
        while done < len(view):
            n = fileops.OPS.pwrite(fd, view[done:], done)
            if n <= 0:
                raise OSError(errno.ENOSPC, "no progress writing", str(tmp))
            done += n
        fileops.OPS.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        fileops.OPS.fsync(dir_fd)
    finally:
        os.close(dir_fd)
