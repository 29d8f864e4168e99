"""A tiny named registry for plug-in families (routers, admission policies, scorers, ...).

A plug-in is one file that decorates its class or factory with ``@FAMILY.register("name")``; configs
name it by that string. An unknown name is a user error that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from distsim.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, family: str, key: str):
        self.family = family  # e.g. "routing policy"
        self.key = key  # the config key that names a member, e.g. "policy.routing.kind"
        self._members: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._members:
                raise ValueError(f"{self.family} {name!r} registered twice")
            self._members[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._members[name]
        except KeyError:
            raise ConfigError(self.key, f"unknown {self.family} {name!r}; known: {', '.join(sorted(self._members))}") from None

    def names(self) -> list[str]:
        return sorted(self._members)

    def __contains__(self, name: str) -> bool:
        return name in self._members
