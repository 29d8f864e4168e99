"""Ask/tell optimisers behind one small interface.

``cmaes``: CMA-ES from the ``cmaes`` package (a small, well-kept numpy-only implementation with
ask/tell and seeding). Continuous spaces use plain CMA-ES in the normalised box; spaces with integers
or categories use CatCMA with margin (Hamano et al., GECCO 2025), which keeps integer and categorical
variables from collapsing early. ``random``: uniform sampling, the baseline any search must beat.
``gp``: genetic programming over routing expressions (distsim.search.gp). All are deterministic for a seed,
so a search replays exactly (which is also how it resumes).
"""

from __future__ import annotations

import warnings

import numpy as np

from distsim.errors import ConfigError
from distsim.search.ask_tell import Optimizer
from distsim.search.space import Coordinate, SearchSpace


class CMAESOptimizer(Optimizer[object]):  # a handle is the cmaes package's own solution object
    def __init__(self, space: SearchSpace, population: int, seed: int):
        import cmaes

        self.space = space
        self.population = population
        self.mixed = bool(space.ints or space.categoricals)
        d = len(space.floats)
        if self.mixed:
            self.opt = cmaes.CatCMAwM(
                x_space=[[0.0, 1.0]] * d if d else None,
                z_space=[list(range(int(v.low), int(v.high) + 1)) for v in space.ints] or None,
                c_space=[len(v.choices) for v in space.categoricals] or None,
                population_size=population,
                seed=seed,
            )
        else:
            self.opt = cmaes.CMA(
                mean=np.full(d, 0.5),
                sigma=0.3,
                bounds=np.array([[0.0, 1.0]] * d),
                seed=seed,
                population_size=population,
            )

    def ask(self):
        out = []
        for _ in range(self.population):
            sol = self.opt.ask()
            point: dict[str, Coordinate] = {}
            if self.mixed:
                for v, x in zip(self.space.floats, sol.x if sol.x is not None else []):
                    point[v.key] = float(x)
                for v, z in zip(self.space.ints, sol.z if sol.z is not None else []):
                    point[v.key] = int(round(float(z)))
                for v, c in zip(self.space.categoricals, sol.c if sol.c is not None else []):
                    point[v.key] = int(np.argmax(c))
            else:
                for v, x in zip(self.space.floats, sol):
                    point[v.key] = float(x)
            out.append((sol, point))
        return out

    def tell(self, results):
        told = [(handle, -fitness) for handle, fitness in results]  # cmaes minimises
        if len({value for _, value in told}) == 1:
            # Every candidate scored the same (all failed, or the searched keys changed nothing on these
            # seeds): the generation ranks nothing. Told anyway, CMA-ES would rank them in the order they
            # were asked, drift towards the first ones and widen its step size (CatCMAwM also took the
            # median of an empty list, numpy's RuntimeWarnings). Not told, the next generation is asked
            # from the same distribution.
            return
        if not self.mixed:
            self.opt.tell(told)
            return
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            # CatCMAwM scales its bound penalty by the median of the interquartile ranges of the
            # generations so far; while none had a non-zero one (more than half tied) that is the median
            # of an empty list: numpy warns ("Mean of empty slice", then 0/0), the penalty is NaN and the
            # candidates keep the ranking of their fitness alone, which is what we want. Only that warning.
            warnings.filterwarnings("ignore", message="Mean of empty slice", category=RuntimeWarning)
            self.opt.tell(told)


class RandomOptimizer(Optimizer[None]):
    def __init__(self, space: SearchSpace, population: int, seed: int):
        self.space = space
        self.population = population
        self.rng = np.random.default_rng(seed)

    def ask(self):
        out = []
        for _ in range(self.population):
            point: dict[str, Coordinate] = {}
            for v in self.space.variables:
                if v.kind == "float":
                    point[v.key] = float(self.rng.random())
                elif v.kind == "int":
                    point[v.key] = int(self.rng.integers(int(v.low), int(v.high) + 1))
                else:
                    point[v.key] = int(self.rng.integers(len(v.choices)))
            out.append((None, point))
        return out

    def tell(self, results):
        pass


def _gp(space: SearchSpace, population: int, seed: int, settings=None, weights=(1.0,)):
    from distsim.search.gp import GPOptimizer, GPSettings

    return GPOptimizer(population, seed, GPSettings.from_node(settings), weights)


_ALGORITHMS = {"cmaes": CMAESOptimizer, "random": RandomOptimizer, "gp": _gp}


def check_optimizer(algorithm: str, population: int) -> None:
    if population < 2:
        raise ConfigError("search.population", f"must be >= 2 (got {population})")
    if algorithm not in _ALGORITHMS:
        raise ConfigError("search.algorithm", f"unknown algorithm {algorithm!r}; known: {', '.join(_ALGORITHMS)}")


def build_optimizer(
    algorithm: str, space: SearchSpace, population: int, seed: int, gp_settings=None, weights=(1.0,)
) -> Optimizer:
    """``gp_settings`` (search.gp) and ``weights`` (one per objective) are read by gp alone."""
    check_optimizer(algorithm, population)
    if algorithm == "gp":
        return _gp(space, population, seed, gp_settings, weights)
    return _ALGORITHMS[algorithm](space, population, seed)
