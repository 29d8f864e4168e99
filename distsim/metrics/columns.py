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
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

KINDS = ("int64", "float64", "bool", "string", "str", "category")


class Table:
    """Named columns of equal length, in order, each a numpy array of one ``kind``."""

    __slots__ = ("_columns", "_kinds", "_categories")

    def __init__(self) -> None:
        self._columns: dict[str, np.ndarray] = {}
        self._kinds: dict[str, str] = {}
        self._categories: dict[str, tuple[str, ...]] = {}

    def add(self, name: str, values: npt.ArrayLike, kind: str, categories: Sequence[str] = ()) -> Table:
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

    def write_parquet(self, path: str | os.PathLike) -> None:
        """Write this table to ``path`` as pandas would (the module's :func:`write_parquet`; what
        distsim.outputs.write_parquet calls, which knows no column table)."""
        write_parquet(path, self)

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
    """The installed pandas' version and major number, without importing pandas: from the module if
    it is loaded, else from the name of its ``.dist-info`` directory (``importlib.metadata`` costs more
    to import than the file takes to write), else from importlib.metadata."""
    version = getattr(sys.modules.get("pandas"), "__version__", None)
    if version is None:
        version = _dist_info_version("pandas")
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("pandas")
        except metadata.PackageNotFoundError:
            return None
    head = version.split(".")[0]
    return version, int(head) if head.isdigit() else 0


def _dist_info_version(name: str) -> str | None:
    """The version in the ``NAME-VERSION.dist-info`` directory beside an installed package, if one."""
    from importlib.util import find_spec

    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = Path(next(iter(spec.submodule_search_locations))).parent
    found = sorted(site.glob(f"{name}-*.dist-info"))
    return found[0].name[len(name) + 1 : -len(".dist-info")] if len(found) == 1 else None


def _arrow_column(table: Table, name: str) -> tuple[pa.Array, dict[str, Any]]:
    """The Arrow array of one column and its entry in the ``pandas`` metadata, as pyarrow's
    ``Table.from_pandas`` makes them for pandas 3's dtypes."""
    values, kind = table[name], table.kind(name)
    meta: dict[str, Any] = {"name": name, "field_name": name}
    if kind in ("int64", "float64", "bool"):
        arr, logical, numpy_type = _numeric(values), kind, kind
    elif kind in ("string", "str"):
        arr, logical, numpy_type = _large_strings(values), "object", kind
    else:  # category
        import pyarrow as pa

        cats = np.empty(len(table.categories(name)), dtype=object)
        cats[:] = table.categories(name)
        arr = pa.DictionaryArray.from_arrays(_numeric(values), _large_strings(cats))
        logical, numpy_type = "categorical", str(values.dtype)
    meta.update(pandas_type=logical, numpy_type=numpy_type)
    meta["metadata"] = {"num_categories": len(table.categories(name)), "ordered": False} if kind == "category" else None
    return arr, meta


# The arrays are assembled from their buffers: ``pyarrow.array`` imports pandas to ask whether its input
# is a pandas object.


def _bits(flags: np.ndarray) -> pa.Buffer:
    """Arrow's bit-packed booleans (least significant bit first)."""
    import pyarrow as pa

    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def _validity(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap (None when nothing is null, as pyarrow leaves it) and the null count."""
    nulls = int(valid.size - np.count_nonzero(valid))
    return (_bits(valid) if nulls else None), nulls


def _numeric(values: np.ndarray) -> pa.Array:
    """An int, float (NaN as null, as pandas' conversion makes it) or bool column."""
    import pyarrow as pa

    arrow_type = pa.from_numpy_dtype(values.dtype)
    validity, nulls = _validity(~np.isnan(values)) if values.dtype.kind == "f" else (None, 0)
    data = _bits(values) if values.dtype == np.bool_ else pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(arrow_type, len(values), [validity, data], null_count=nulls)


def _large_strings(values: np.ndarray) -> pa.Array:
    """A large_string column from Python strings (None as null)."""
    import pyarrow as pa

    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    encoded = [v.encode("utf-8") if v is not None else b"" for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    validity, nulls = _validity(valid)
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.large_string(), len(values), buffers, null_count=nulls)


def to_arrow(table: Table, pandas_version: str) -> pa.Table:
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
