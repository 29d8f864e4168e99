"""Typed, bounded access to the fields of a HuggingFace ``config.json``.

Every field the model reader uses goes through :class:`FieldReader`, so a value of the wrong JSON type
(``"false"`` for a boolean, ``8.0`` for a count), an absurd size or two alias keys that disagree stops
with one line naming the file and the field, instead of being coerced (``bool("false")`` is true) or
looped over (a billion layers). The bounds are far above any published model and only keep the
arithmetic and the per-layer loops small.
"""

from __future__ import annotations

from typing import Any, TypeVar

from distsim.errors import ConfigError
from distsim.inputs import excerpt

T = TypeVar("T")

MAX_LAYERS = 10_000  # the deepest public models have under 200 layers
MAX_SIZE = 1 << 24  # widths, head and expert counts, vocabularies: ~100x the largest public model's


class FieldReader:
    """Reads fields of ``cfg``; every error is a ConfigError on ``key`` naming ``where`` (the file)."""

    def __init__(
        self,
        cfg: dict[str, Any],
        where: str,
        key: str,
        prefix: str = "",
        top_level: frozenset[str] = frozenset(),
    ):
        """``prefix`` names the object ``cfg`` sits in (``"text_config."``, ``"quantization_config."``) in
        messages; fields named in ``top_level`` were taken from the file's top level and carry no prefix."""
        self.cfg, self.where, self.key = cfg, where, key
        self.prefix, self.top_level = prefix, top_level

    def fail(self, rule: str) -> ConfigError:
        return ConfigError(self.key, f"{self.where}: {rule}")

    def label(self, name: str) -> str:
        """The field's name as the file spells its place (``text_config.hidden_size``)."""
        return name if name in self.top_level else self.prefix + name

    def sub(self, name: str) -> FieldReader | None:
        """A reader over the JSON object in field ``name``; null or absent: None."""
        value = self.cfg.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(f"'{self.label(name)}' must be an object (got {excerpt(value)})")
        return FieldReader(value, self.where, self.key, prefix=self.label(name) + ".")

    def subs(self, name: str) -> list[FieldReader]:
        """Readers over every member of the object of objects in field ``name``; null or absent: []."""
        outer = self.sub(name)
        if outer is None:
            return []
        found = [outer.sub(k) for k in outer.cfg]
        return [f for f in found if f is not None]

    def str_list(self, name: str) -> list[str]:
        """A list of strings; null or absent: []."""
        value = self.cfg.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"'{self.label(name)}' must be a list of strings (got {excerpt(value)})")
        return value

    def has(self, name: str) -> bool:
        """The field is present and not null."""
        return self.cfg.get(name) is not None

    def int(
        self, name: str, default: int | None = None, minimum: int = 1, maximum: int = MAX_SIZE, why: str = ""
    ) -> int:
        """A JSON integer (not a boolean, not 8.0) in [minimum, maximum]; null or absent: ``default``.
        ``why`` explains a maximum other than the absolute bounds."""
        value = self.cfg.get(name)
        if value is None:
            if default is None:
                raise self.fail(f"missing required field '{self.label(name)}'")
            return default
        return self._check_int(self.label(name), value, minimum, maximum, why)

    def _check_int(self, label: str, value: object, minimum: int, maximum: int, why: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"'{label}' must be an integer (got {excerpt(value)})")
        if value < minimum:
            raise self.fail(f"'{label}' must be >= {minimum} (got {excerpt(value)})")
        if value > maximum:
            why = why or "no real model comes near it"
            raise self.fail(f"'{label}' must be <= {maximum}: {why} (got {excerpt(value)})")
        return value

    def bool(self, name: str, default: bool) -> bool:
        """A JSON boolean (``true``/``false``, not ``"false"`` or 0); null or absent: ``default``."""
        return self._typed(name, default, bool, "true or false")

    def str(self, name: str, default: str) -> str:
        return self._typed(name, default, str, "a string")

    def _typed(self, name: str, default: T, kind: type[T], rule: str) -> T:
        value = self.cfg.get(name)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise self.fail(f"'{self.label(name)}' must be {rule} (got {excerpt(value)})")
        return value

    def int_list(self, name: str, minimum: int, maximum: int, why: str) -> list[int]:
        """A list of integers, each in [minimum, maximum]; null or absent: []."""
        value = self.cfg.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"'{self.label(name)}' must be a list of integers (got {excerpt(value)})")
        return [
            self._check_int(f"{self.label(name)}[{i}]", v, minimum, maximum, why) for i, v in enumerate(value)
        ]

    def choice_list(self, name: str, length: int, known: tuple[str, ...]) -> list[str] | None:
        """A list of exactly ``length`` strings from ``known``; null or absent: None."""
        value = self.cfg.get(name)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(f"'{self.label(name)}' must be a list of strings (got {excerpt(value)})")
        if len(value) != length:
            raise self.fail(
                f"'{self.label(name)}' has {len(value)} entries but num_hidden_layers is {length}"
            )
        for i, v in enumerate(value):
            if v not in known:
                raise self.fail(f"'{self.label(name)}[{i}]' is {excerpt(v)}; supported: {', '.join(known)}")
        return value

    def same_int(self, names: tuple[str, ...], minimum: int = 0) -> tuple[str | None, int]:
        """(first present name, value) of alias keys that must agree; (None, 0) when none is present."""
        found = [(n, self.int(n, minimum=minimum)) for n in names if self.has(n)]
        for n, v in found[1:]:
            if v != found[0][1]:
                first, fv = found[0]
                raise self.fail(
                    f"'{self.label(first)}' ({fv}) and '{self.label(n)}' ({v}) disagree; give one value"
                )
        return found[0] if found else (None, 0)

    def same_str(self, names: tuple[str, ...], default: str) -> str:
        """The value of alias string keys that must agree (``default`` when none is present)."""
        found = [(n, self.str(n, "")) for n in names if self.has(n)]
        for n, v in found[1:]:
            if v != found[0][1]:
                raise self.fail(
                    f"'{self.label(found[0][0])}' ({excerpt(found[0][1])}) and '{self.label(n)}' ({excerpt(v)}) disagree; give one value"
                )
        return found[0][1] if found else default
