"""Refusing null where the schema says an array cannot be null.

kio's reader decodes a length of -1 (or a compact length of 0) as ``None`` for every array, also
for arrays the schema declares non-nullable, while it refuses null strings of non-nullable
fields itself. Handlers iterate the arrays they are given, so a three-byte request with a null
``topics`` crashed the handler (found by ``tests/integration/wire/test_fuzz.py``). Kafka's
generated readers throw "non-nullable field ... was serialized as null" for this; so do we,
before any handler sees the body.

The walk is planned once per entity type and only descends into types that hold arrays or
nested entities, so for the common wide requests (a Fetch's partitions have no arrays) it visits
the partition list, not every partition.
"""

from __future__ import annotations

import dataclasses
import types
from functools import lru_cache
from typing import Any, Union, get_args, get_origin

from protocol.errors import MalformedRequestError

# (field name, nullable, entity type to descend into or None, is an array)
_Step = tuple[str, bool, "type | None", bool]


def _unwrap(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(get_args(tp))
    return tp, False


@lru_cache(maxsize=None)
def _plan(entity_type: type) -> tuple[_Step, ...]:
    steps: list[_Step] = []
    for f in dataclasses.fields(entity_type):
        tp, nullable = _unwrap(f.type)
        if get_origin(tp) is tuple:
            inner, _ = _unwrap(get_args(tp)[0])
            nested = isinstance(inner, type) and dataclasses.is_dataclass(inner) and _plan(inner)
            sub = inner if nested else None
            steps.append((f.name, nullable, sub, True))
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp) and _plan(tp):
            steps.append((f.name, True, tp, False))  # a null struct is kio's to refuse
    return tuple(steps)


def _walk(entity: Any, entity_type: type) -> None:
    for name, nullable, sub, is_array in _plan(entity_type):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                raise MalformedRequestError(
                    f"non-nullable field {entity_type.__name__}.{name} was serialized as null")
            continue
        if sub is None:
            continue
        if is_array:
            for item in value:
                _walk(item, sub)
        else:
            _walk(value, sub)


def check(body: Any) -> None:
    """Refuse a decoded body in which a non-nullable array is ``None``.

    Raises:
        MalformedRequestError: naming the first such field.
    """
    _walk(body, type(body))
