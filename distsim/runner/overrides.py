"""Typed overrides: parsed once by Hydra's own grammar, then carried as (key, value) pairs.

Why: a sweep's overrides used to become "k=v" text right after parsing and were split again wherever a
key or a value was needed, with the value's type guessed back from the text. Here each override is
parsed once by Hydra's OverridesParser into an immutable :class:`Override` that holds the key, the Python
value and the text Hydra prints for it. The text only shows an override (overrides.yaml, the
``overrides``/``config`` columns, labels), identifies a job (resume, sweep_id.json) and goes to Hydra's
compose, which takes text; nothing here parses it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override as HydraOverride
from hydra.core.override_parser.types import QuotedString, Transformer

from distsim.errors import UserError

# an override's Python value: a YAML scalar, a list (as a tuple) or a mapping of them
Plain = int | float | bool | str | None | tuple["Plain", ...] | dict["Plain", "Plain"]


@dataclass(frozen=True)
class Override:
    """One ``key=value``. ``value`` is the Python value (a list as a tuple); equality and hashing go by
    the text, which determines the value."""

    prefix: str  # "", "+", "++" or "~", as written
    key: str  # dotted key or config group ("cluster.instances", "policy"), @package included
    value: Plain = field(compare=False)
    shown: str  # the value as Hydra prints it: "0.001", "'a b'", "[1,2]", "null", "True"
    text: str  # the whole override as shown and hashed: "+tag='a b'"

    @classmethod
    def of(cls, key: str, value: Plain, shown: str, prefix: str = "") -> Override:
        """An override whose text is the one Hydra prints for it."""
        return cls(prefix, key, value, shown, f"{prefix}{key}={shown}")

    @property
    def element(self) -> str:
        """The key as written, prefix included: ``+x`` and ``x`` are different overrides to Hydra."""
        return self.prefix + self.key

    @property
    def column_value(self) -> int | float | str:
        """The value of its ``param.<key>`` column: a number stays a number (the report plots those);
        anything else is its text, so that a column holds one type whatever the jobs' values are."""
        if isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            return self.value
        return self.shown


def texts(overrides: Iterable[Override]) -> list[str]:
    """The overrides as Hydra's compose takes them."""
    return [o.text for o in overrides]


def joined(overrides: Iterable[Override]) -> str:
    """One line of overrides: a job's ``overrides``/``config`` column, its identity for resume."""
    return " ".join(o.text for o in overrides)


def _plain(element: object) -> Plain:
    """A parsed element as a Python value: quotes dropped, lists frozen as tuples."""
    if isinstance(element, QuotedString):
        return element.text
    if isinstance(element, list):
        return tuple(_plain(e) for e in element)
    if isinstance(element, dict):
        return {_plain(k): _plain(v) for k, v in element.items()}
    return element


def _split_key(parsed: HydraOverride) -> tuple[str, str]:
    element = parsed.get_key_element()
    key = element.lstrip("+~")
    return element[: len(element) - len(key)], key


def parse(arguments: Sequence[str], parser: OverridesParser | None = None) -> list[HydraOverride]:
    """Hydra's parse of command-line overrides; a syntax error is one line. ``parser`` should carry
    Hydra's config loader when a value may be ``glob()`` (it lists a group's options)."""
    parser = parser or OverridesParser.create()
    try:
        return parser.parse_overrides(list(arguments))
    except Exception as err:  # Hydra's OverrideParseException and friends: the user's typing
        raise UserError(f"sweep error: {str(err).splitlines()[0]}") from None


def expand(parsed: HydraOverride) -> list[Override]:
    """Every value of one parsed override: a list, ``range()`` or ``glob()`` in order, or its one value."""
    prefix, key = _split_key(parsed)
    if not parsed.is_sweep_override():
        return [Override.of(key, _plain(parsed.value()), parsed.get_value_element_as_str(), prefix)]
    if not parsed.is_discrete_sweep():
        raise UserError(
            f"sweep error: {parsed.input_line}: the distsim sweeper enumerates lists, range() and glob() only"
        )
    values = [Override.of(key, _plain(e), Transformer.str(e), prefix) for e in parsed.sweep_iterator()]
    if not values:
        raise UserError(f"sweep error: {parsed.input_line}: the sweep has no values")
    return values


def from_lines(lines: Sequence[str], parser: OverridesParser | None = None) -> list[Override]:
    """Single overrides (no sweeps) whose text stays exactly as written, e.g. a search's configurations:
    their text already names the jobs on disk."""
    out = []
    for parsed, line in zip(parse(lines, parser), lines):
        if parsed.is_sweep_override():
            raise UserError(f"sweep error: {line}: one value expected here, not a sweep")
        prefix, key = _split_key(parsed)
        shown = parsed.get_value_string() if "=" in line else parsed.get_value_element_as_str()
        out.append(Override(prefix, key, _plain(parsed.value()), shown, line))
    return out
