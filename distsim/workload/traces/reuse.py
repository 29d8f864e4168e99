"""A trace's own prefix-reuse bound: what an infinite prefix cache could at most serve.

For each request in order, the tokens covered by the longest prefix already seen in an earlier
request, over all prompt tokens. No simulated cache can do better: it can only hit blocks that some
earlier request computed (and must still hold them). Two views:

* :func:`block_reuse` on requests' ``block_hashes`` (engine blocks: what the simulator can hit);
* :func:`hash_id_reuse` on a Mooncake file's ``hash_ids`` (512-token blocks, the data README's figure).

``python -m distsim.workload.traces.reuse FILE [BLOCK_SIZE]`` prints both for a Mooncake file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from distsim.errors import UserError
from distsim.workload.traces.mooncake import BLOCK_TOKENS, MooncakeReader


@dataclass(frozen=True)
class Reuse:
    prompt_tokens: int
    reused_tokens: int

    @property
    def fraction(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def block_reuse(requests: Iterable, block_size: int) -> Reuse:
    """Reuse over ``requests`` (anything with ``prompt_tokens`` and ``block_hashes``)."""
    seen: set = set()
    total = reused = 0
    for r in requests:
        total += r.prompt_tokens
        keys = r.block_hashes
        if not keys:
            continue
        k = 0
        while k < len(keys) and keys[k] in seen:
            k += 1
        reused += k * block_size
        seen.update(keys)
    return Reuse(total, reused)


def hash_id_reuse(path, block_tokens: int = BLOCK_TOKENS) -> Reuse:
    """Reuse over a Mooncake trace's hash ids; a matched last (partial) block counts its real tokens."""
    seen: set = set()
    total = reused = 0
    for row in MooncakeReader(path).rows():
        ids = row.hash_ids
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        total += row.input_tokens
        reused += min(k * block_tokens, row.input_tokens)
        seen.update(ids)
    return Reuse(total, reused)


USAGE = "usage: python -m distsim.workload.traces.reuse MOONCAKE_JSONL [BLOCK_SIZE]"


def main(argv: list[str]) -> int:
    """Print both reuse figures; a usage or input mistake prints one line on stderr and returns 2."""
    from distsim.workload import build_workload

    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if not 1 <= len(argv) <= 2:
        print(USAGE, file=sys.stderr)
        return 2
    path = argv[0]
    if len(argv) == 2 and not (argv[1].isascii() and argv[1].isdigit() and int(argv[1]) >= 1):
        print(f"distsim: BLOCK_SIZE must be an integer >= 1 (got {argv[1]!r}); {USAGE}", file=sys.stderr)
        return 2
    bs = int(argv[1]) if len(argv) == 2 else 16
    try:
        h = hash_id_reuse(path)
        src = build_workload(
            {"kind": "trace", "format": "mooncake", "path": path, "num_requests": None}, seed=0, block_size=bs
        )
        b = block_reuse(src, bs)
    except UserError as err:
        print(f"distsim: {err}", file=sys.stderr)
        return 2
    print(f"{path}: {h.prompt_tokens} prompt tokens")
    print(f"  hash-id reuse ({BLOCK_TOKENS}-token blocks): {h.fraction:.4f}")
    print(f"  engine-block reuse (block size {bs}): {b.fraction:.4f}")
    return 0


if __name__ == "__main__":
    from distsim import command

    command.run("distsim", lambda: main(sys.argv[1:]))  # a full or closed stdout, and Ctrl-C, as one line
