"""A result table as named numpy columns, written to Parquet without pandas.

Why: a single run's tables (requests.parquet, instances.parquet) and its summary need nothing pandas
does, and importing pandas costs about half a CPU-second, a third of a short run's whole process. A
:class:`Table` holds each column as a numpy array with the pandas dtype it stands for (``kind``);
:meth:`Table.to_pandas` builds the DataFrame the Python API returns, and :func:`write_parquet` writes
the file pandas' ``to_parquet`` would write, byte for byte: the same Arrow types, NaN as null, and the
same ``pandas`` schema metadata (what ``pd.read_parquet`` uses to restore the dtypes). With pandas
before 3.0, whose string dtypes map to other Arrow types, the file is written through pandas instead.
tests/test_output_tables.py checks the bytes against pandas' own.

Kinds: ``int64``, ``float64``, ``bool``; ``string`` (pandas' StringDtype; values are str or None);
``str`` (Python strings, as pandas infers them: its ``str`` dtype); ``category`` (integer codes into
``categories``, as ``pd.Categorical.from_codes``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

KINDS = ("int64", "float64", "bool", "string", "str", "category")


class Table:
    """Named columns of equal length, in order, each a numpy array of one ``kind``."""

    __slots__ = ("_columns", "_kinds", "_categories")

    def __init__(self) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._kinds: dict[str, str] = {}
        self._categories: dict[str, tuple[str, ...]] = {}

    def add(self, name: str, values: Any, kind: str, categories: Sequence[str] = ()) -> Table:
        """Append column ``name`` (a sequence or an array; stored as a numpy array of the kind's type)."""
        if kind not in KINDS:
            raise ValueError(f"unknown column kind {kind!r}")
        if kind in ("string", "str"):
            arr = np.empty(len(values), dtype=object)
            arr[:] = list(values)
        elif kind == "category":
            arr = np.asarray(values, dtype=_codes_dtype(len(categories)))
            self._categories[name] = tuple(categories)
        else:
            arr = np.asarray(values, dtype=kind)
        if self._columns and len(arr) != len(self):
            raise ValueError(f"column {name!r} has {len(arr)} rows, the table {len(self)}")
        self._columns[name] = arr
        self._kinds[name] = kind
        return self

    def __len__(self) -> int:
        return len(next(iter(self._columns.values()))) if self._columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def kind(self, name: str) -> str:
        return self._kinds[name]

    def categories(self, name: str) -> tuple[str, ...]:
        return self._categories[name]

    def to_pandas(self) -> pd.DataFrame:
        """The DataFrame: each column with the dtype its kind names."""
        import pandas as pd

        data: dict[str, Any] = {}
        for name, values in self._columns.items():
            kind = self._kinds[name]
            if kind == "string":
                data[name] = pd.array(values, dtype="string")
            elif kind == "str":
                data[name] = values.tolist()  # pandas infers its string dtype, as from rows of Python str
            elif kind == "category":
                data[name] = pd.Categorical.from_codes(values, categories=list(self._categories[name]))
            else:
                data[name] = values
        return pd.DataFrame(data)


def _codes_dtype(n: int) -> type:
    """The integer type pandas keeps a categorical's codes in, for ``n`` categories."""
    for dtype in (np.int8, np.int16, np.int32):
        if n < np.iinfo(dtype).max:
            return dtype
    return np.int64


def _pandas_version() -> tuple[str, int] | None:
    """The installed pandas' version and major number, read from its metadata (without importing it)."""
    from importlib import metadata

    try:
        version = metadata.version("pandas")
    except metadata.PackageNotFoundError:
        return None
    head = version.split(".")[0]
    return version, int(head) if head.isdigit() else 0


def _arrow_column(table: Table, name: str) -> tuple[Any, dict[str, Any]]:
    """The Arrow array of one column and its entry in the ``pandas`` metadata, as pyarrow's
    ``Table.from_pandas`` makes them for pandas 3's dtypes."""
    import pyarrow as pa

    values, kind = table[name], table.kind(name)
    meta: dict[str, Any] = {"name": name, "field_name": name}
    if kind == "int64":
        arr, logical, numpy_type = pa.array(values, type=pa.int64()), "int64", "int64"
    elif kind == "float64":
        arr, logical, numpy_type = pa.array(values, type=pa.float64(), from_pandas=True), "float64", "float64"
    elif kind == "bool":
        arr, logical, numpy_type = pa.array(values, type=pa.bool_()), "bool", "bool"
    elif kind in ("string", "str"):
        arr, logical, numpy_type = pa.array(values, type=pa.large_string(), from_pandas=True), "object", kind
    else:  # category
        cats = table.categories(name)
        arr = pa.DictionaryArray.from_arrays(pa.array(values), pa.array(list(cats), type=pa.large_string()))
        logical, numpy_type = "categorical", str(values.dtype)
    meta.update(pandas_type=logical, numpy_type=numpy_type)
    meta["metadata"] = {"num_categories": len(table.categories(name)), "ordered": False} if kind == "category" else None
    return arr, meta


def to_arrow(table: Table, pandas_version: str) -> Any:
    """The pyarrow Table pandas would hand to ``pyarrow.parquet.write_table`` for ``table.to_pandas()``
    (index not kept)."""
    import pyarrow as pa

    arrays, columns = zip(*(_arrow_column(table, name) for name in table)) if len(table._columns) else ((), ())
    pandas_meta = {
        "index_columns": [],
        "column_indexes": [],
        "columns": list(columns),
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": pandas_version,
    }
    schema = pa.schema(
        [pa.field(name, arr.type) for name, arr in zip(table, arrays)],
        metadata={b"pandas": json.dumps(pandas_meta).encode("utf8")},
    )
    return pa.Table.from_arrays(list(arrays), schema=schema)


def write_parquet(path: str | os.PathLike, table: Table) -> None:
    """Write ``table`` to ``path`` as ``table.to_pandas().to_parquet(path, index=False)`` would."""
    version = _pandas_version()
    if version is None or version[1] < 3:
        table.to_pandas().to_parquet(path, index=False, engine="pyarrow")
        return
    import pyarrow.parquet as pq

    pq.write_table(to_arrow(table, version[0]), path, compression="snappy")
