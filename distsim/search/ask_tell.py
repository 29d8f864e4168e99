"""The ask/tell interface every optimiser of the search implements (distsim.search.optimizer: CMA-ES and
random; distsim.search.gp: genetic programming)."""

from __future__ import annotations

from typing import Generic, TypeVar

from distsim.search.space import Coordinate, Value

H = TypeVar("H")  # what an optimiser hands out with each candidate and is told back with its fitness


class Optimizer(Generic[H]):
    population: int

    def ask(self) -> list[tuple[H, dict[str, Coordinate]]]:
        """One generation: (handle, {key: normalised coordinate}) per candidate."""
        raise NotImplementedError

    def tell(self, results: list[tuple[H, float]]) -> None:
        """Fitness per handle (higher is better); a tuple of objectives for a multi-objective optimiser."""
        raise NotImplementedError

    def values(self, point: dict[str, Coordinate]) -> dict[str, Value]:
        """A candidate's config values ({key: value}) from what ask gave with it."""
        return self.space.values(point)
