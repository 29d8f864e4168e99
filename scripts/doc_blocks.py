"""Generated blocks in the docs: text between a begin and an end marker, replaced whole by the script that
owns the block (scripts/fidelity_h100.py, scripts/search_tables.py)."""

from __future__ import annotations

import re
from pathlib import Path


def replace_block(path: Path, text: str, begin: str, end: str) -> None:
    """Put ``text`` between the ``begin`` and ``end`` markers of ``path``; a file without them is an error."""
    body = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(body):
        raise SystemExit(f"{path}: no {begin} ... {end} block to fill")
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", body), encoding="utf-8")
