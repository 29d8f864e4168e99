"""A tiny named registry for plug-in families (routers, scorers, latency models, trace readers, ...).

A plug-in is a class or factory decorated with ``@FAMILY.register("name")``; configs name it by that
string. Every family is found the same way: its registry knows where its members live (``members``:
packages, every module of which is imported, or single modules) and imports them on the first
lookup, so nothing has to import the implementations by hand and a base module never needs to.
An unknown name is one ConfigError naming the config key and the known names; a name registered
twice is a bug and raises at import.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from distsim.errors import ConfigError

T = TypeVar("T")


def import_members(home: str) -> None:
    """Import ``home`` and, if it is a package, every module directly inside it (their decorators run)."""
    module = importlib.import_module(home)
    for info in pkgutil.iter_modules(getattr(module, "__path__", ()), home + "."):
        importlib.import_module(info.name)


class Registry(Generic[T]):
    """Names to plug-ins for one family; read like a read-only mapping (``in``, iteration, ``[]``)."""

    def __init__(self, family: str, key: str, members: str | tuple[str, ...] = ()):
        self.family = family  # e.g. "routing policy"
        self.key = key  # the config key that names a member, e.g. "policy.routing.kind"
        self.homes = (members,) if isinstance(members, str) else tuple(members)  # where members live
        self._members: dict[str, T] = {}
        self._discovered = not self.homes

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._members:
                raise ValueError(f"{self.family} {name!r} registered twice")
            self._members[name] = obj
            return obj

        return deco

    def discover(self) -> None:
        """Import every module that holds members (once; later calls are free)."""
        if self._discovered:
            return
        self._discovered = True  # first: a member module that looks itself up must not recurse
        try:
            for home in self.homes:
                import_members(home)
        except BaseException:
            self._discovered = False
            raise

    def get(self, name: str, key: str | None = None) -> T:
        """The member called ``name``; ``key`` names the config key when it is not the family's own
        (a per-pool or per-tenant copy of the setting)."""
        self.discover()
        try:
            return self._members[name]
        except (KeyError, TypeError):  # TypeError: an unhashable value from a config
            known = ", ".join(self.names())
            raise ConfigError(key or self.key, f"unknown {self.family} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._members)

    def __contains__(self, name: object) -> bool:
        self.discover()
        try:
            return name in self._members
        except TypeError:
            return False

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
