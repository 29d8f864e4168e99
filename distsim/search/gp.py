"""Strongly-typed genetic programming over routing expressions, with DEAP, behind the ask/tell interface.

The primitive set is built from the expression grammar's tables (distsim.policies.expression.grammar):
every operator with its argument and return types, every terminal, and a few constants. The first
generation is the seed expressions (``search.gp.seeds``: the built-ins written as expressions) and ramped
half-and-half trees; each later generation is as many offspring as the population, each by one-point
crossover or by a mutation (a new subtree, a node replaced, a subtree shrunk), under static limits on
height and node count (bloat control), and never an expression evaluated before. Survivors are chosen by
NSGA-II from parents and offspring (mu + lambda; with one objective that is truncation by fitness), and
parents by DEAP's dominance-and-crowding tournament.

DEAP draws from the ``random`` module. Every ask and tell runs with it seeded from (seed, generation, step)
and restores the caller's state afterwards, so a search replays exactly, which is how it resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import random
from dataclasses import dataclass
from functools import partial

from deap import base, gp, tools

from distsim.errors import ConfigError
from distsim.policies.expression.grammar import CONSTANTS, OPS, TERMINALS, Bool, Num
from distsim.policies.expression.tree import ExpressionError, Node, const, emit, parse
from distsim.search.ask_tell import Optimizer

EXPRESSION_KEY = "policy.routing.expression"
_NAMES = frozenset(t.name for t in TERMINALS if t.evolved)
ATTEMPTS = 50  # tries for an offspring (or initial tree) that is new and within the limits
# Upper bounds on the tree limits. A full tree roughly doubles with each level (measured with this
# primitive set: median 869 nodes and 0.5 ms at height 10, 14,391 nodes and 8.5 ms at 15, and about a
# thousand times that at 25), and the first generation may draw ATTEMPTS trees per member, so the
# initial heights stop at 10 (a first generation of 100 in 2 s at worst, every draw too big for
# max_size 40). MAX_HEIGHT is Koza's classic limit: an emitted tree reads back exactly as deep as it is
# high, far below the expression parser's nesting limit. MAX_SIZE bounds one score's work per decision.
MAX_HEIGHT = 17
MAX_INIT_HEIGHT = 10
MAX_SIZE = 1000


@dataclass(frozen=True)
class GPSettings:
    max_height: int = 8
    max_size: int = 40
    init_min_height: int = 1
    init_max_height: int = 4
    crossover: float = 0.6  # share of offspring made by crossover; the rest by mutation
    seeds: tuple[str, ...] = ()

    @classmethod
    def from_node(cls, node) -> GPSettings:
        node = dict(node or {})
        values = {k: node[k] for k in cls.__dataclass_fields__ if node.get(k) is not None}
        if "seeds" in values:
            values["seeds"] = tuple(str(s) for s in values["seeds"])
        return cls(**values)

    def check(self) -> None:
        key = "search.gp"
        for name, low, high in (
            ("max_height", 1, MAX_HEIGHT), ("init_min_height", 1, MAX_INIT_HEIGHT),
            ("init_max_height", 1, MAX_INIT_HEIGHT), ("max_size", 3, MAX_SIZE),
        ):  # fmt: skip
            value = getattr(self, name)
            if not low <= value <= high:
                raise ConfigError(f"{key}.{name}", f"must be in [{low}, {high}] (got {value})")
        if self.init_min_height > self.init_max_height:
            raise ConfigError(
                f"{key}.init_min_height", f"must be <= init_max_height {self.init_max_height} (got {self.init_min_height})"
            )
        if self.init_max_height > self.max_height:
            raise ConfigError(
                f"{key}.init_max_height", f"must be <= max_height {self.max_height} (got {self.init_max_height})"
            )
        if not 0 <= self.crossover <= 1:
            raise ConfigError(f"{key}.crossover", f"must be in [0, 1] (got {self.crossover})")
        for i, text in enumerate(self.seeds):
            try:
                tree = parse(text)
            except ExpressionError as err:
                raise ConfigError(f"{key}.seeds[{i}]", str(err)) from None
            if tree.height > self.max_height or tree.size > self.max_size:
                raise ConfigError(f"{key}.seeds[{i}]", f"exceeds max_height {self.max_height} or max_size {self.max_size}")


def primitive_set() -> gp.PrimitiveSetTyped:
    """DEAP's typed primitive set from the grammar's tables (functions are placeholders: trees are
    evaluated by distsim.policies.expression, never compiled by DEAP)."""
    pset = gp.PrimitiveSetTyped("score", [], Num)
    for op in OPS:
        pset.addPrimitive(op.fn, list(op.args), op.ret, name=op.name)
    for t in TERMINALS:
        if t.evolved:
            pset.addTerminal(t.name, t.type, name=t.name)
    for c in CONSTANTS:
        pset.addTerminal(c, Num)
    pset.addTerminal(True, Bool)
    pset.addTerminal(False, Bool)
    return pset


def to_node(tree: gp.PrimitiveTree) -> Node:
    """DEAP's prefix-order tree as an expression tree."""
    def build(i: int) -> tuple[Node, int]:
        item = tree[i]
        if isinstance(item, gp.Primitive):
            args, j = [], i + 1
            for _ in range(item.arity):
                arg, j = build(j)
                args.append(arg)
            return Node(item.name, tuple(args)), j
        if item.name in _NAMES:
            return Node(item.name), i + 1
        return const(item.value), i + 1

    node, end = build(0)
    assert end == len(tree)
    return node


@contextlib.contextmanager
def _seeded(*key: object):
    """The ``random`` module seeded from ``key`` inside, the caller's state restored after."""
    state = random.getstate()
    random.seed(int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big"))
    try:
        yield
    finally:
        random.setstate(state)


class Individual(gp.PrimitiveTree):
    fitness: base.Fitness


class GPOptimizer(Optimizer[Individual]):
    """``weights``: one per objective, +1 maximised, -1 minimised (DEAP's convention)."""

    def __init__(self, population: int, seed: int, settings: GPSettings, weights: tuple[float, ...] = (1.0,)):
        settings.check()
        self.population, self.seed, self.settings = population, seed, settings
        self.pset = primitive_set()
        self.fitness_cls = type("GPFitness", (base.Fitness,), {"weights": tuple(weights)})
        self.generation = 0
        self.parents: list[Individual] = []
        self.offspring: list[Individual] = []
        self.seen: set[str] = set()  # every expression asked so far
        limit_h = gp.staticLimit(operator.attrgetter("height"), settings.max_height)
        limit_n = gp.staticLimit(len, settings.max_size)
        grow = partial(gp.genGrow, min_=0, max_=2)
        self.mate = limit_n(limit_h(gp.cxOnePoint))
        self.mutations = [
            limit_n(limit_h(partial(gp.mutUniform, expr=grow, pset=self.pset))),
            limit_n(limit_h(partial(gp.mutNodeReplacement, pset=self.pset))),
            limit_n(limit_h(gp.mutShrink)),
        ]

    # ------------------------------------------------------------ trees
    def individual(self, node: Node) -> Individual:
        ind = Individual(self._prefix(node))
        ind.fitness = self.fitness_cls()
        return ind

    def _prefix(self, node: Node) -> list:
        if node.name == "const":
            terms = self.pset.terminals[node.type]  # a named terminal's value is its name: never equal
            same = [t for t in terms if t.value == node.value and type(t.value) is type(node.value)]
            return [same[0] if same else gp.Terminal(node.value, False, node.type)]
        if not node.args:
            return [self.pset.mapping[node.name]]
        out = [self.pset.mapping[node.name]]
        for a in node.args:
            out += self._prefix(a)
        return out

    def _fits(self, ind: Individual) -> bool:
        return ind.height <= self.settings.max_height and len(ind) <= self.settings.max_size

    def _new(self, ind: Individual) -> bool:
        return emit(to_node(ind)) not in self.seen

    def _take(self, ind: Individual, out: list[Individual]) -> None:
        self.seen.add(emit(to_node(ind)))
        out.append(ind)

    # ------------------------------------------------------------ ask / tell
    def ask(self):
        with _seeded(self.seed, self.generation, "ask"):
            self.offspring = self._initial() if self.generation == 0 else self._vary()
        return [(ind, {EXPRESSION_KEY: emit(to_node(ind))}) for ind in self.offspring]

    def values(self, point):
        return dict(point)

    def _initial(self) -> list[Individual]:
        out: list[Individual] = []
        for text in self.settings.seeds[: self.population]:
            ind = self.individual(parse(text))
            if self._new(ind):
                self._take(ind, out)
        s = self.settings
        for _ in range(ATTEMPTS * self.population):
            if len(out) >= self.population:
                break
            ind = Individual(gp.genHalfAndHalf(self.pset, s.init_min_height, s.init_max_height))
            ind.fitness = self.fitness_cls()
            if self._fits(ind) and self._new(ind):
                self._take(ind, out)
        return out

    def _parents(self, k: int) -> list[Individual]:
        pool = self.parents
        if len(pool) < 4:
            return tools.selRandom(pool, k)
        chosen: list[Individual] = []
        while len(chosen) < k:
            chosen += tools.selTournamentDCD(pool, 4 * (len(pool) // 4))
        return chosen[:k]

    def _vary(self) -> list[Individual]:
        out: list[Individual] = []
        for _ in range(ATTEMPTS):
            if len(out) >= self.population:
                break
            parents = [self._clone(p) for p in self._parents(2 * (self.population - len(out)))]
            for a, b in zip(parents[::2], parents[1::2]):
                if random.random() < self.settings.crossover:
                    child = self.mate(a, b)[0]
                else:
                    child = random.choice(self.mutations)(a)[0]
                if len(out) < self.population and self._fits(child) and self._new(child):
                    child.fitness = self.fitness_cls()  # not evaluated yet
                    self._take(child, out)
        return out

    def _clone(self, ind: Individual) -> Individual:
        twin = Individual(list(ind))
        twin.fitness = self.fitness_cls()
        twin.fitness.values = ind.fitness.values
        return twin

    def tell(self, results):
        with _seeded(self.seed, self.generation, "tell"):
            for ind, value in results:
                ind.fitness.values = tuple(value) if isinstance(value, (tuple, list)) else (float(value),)
            told = [ind for ind, _ in results]
            self.parents = tools.selNSGA2(self.parents + told, min(self.population, len(self.parents) + len(told)))
        self.generation += 1
