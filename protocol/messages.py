"""Building kio messages across versions.

kio generates one frozen dataclass per (message, version); fields come and go between versions.
Handlers describe a response once, with every field any version has, and ``make`` keeps only the
fields the target version's class defines. Field-name sets are cached per class.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, TypeVar, cast

T = TypeVar("T")


@lru_cache(maxsize=None)
def field_names(cls: type) -> frozenset[str]:
    """Names of the dataclass fields of a kio message class."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type[T], **values: Any) -> T:
    """Instantiate ``cls`` with the subset of ``values`` it has fields for."""
    names = field_names(cast(type, cls))  # mypy does not take type[T] as Hashable
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    """Whether a message class (at its version) carries a field."""
    return name in field_names(cls)
