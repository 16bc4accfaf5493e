"""Where a sweep's tables live on disk, and how to read them back in parts.

The per-run table is written as a Hive-partitioned Parquet dataset, one
directory level per partition column:

    DIR/runs/scenario=dr-multi-zone/param_link_latency_ms=2/param_mode=ASYNC/part-0.parquet

The partition columns are `scenario` and then every grid parameter's
`param_<name>` column (names sorted, as the grid is expanded). A larger sweep
run on a real cluster can therefore be read one scenario or one cell at a time
(`read_runs(DIR, scenario=..., params={...})`, Spark's `spark.read.parquet`,
or `pd.read_parquet(DIR / "runs" / "scenario=X")`) instead of all at once.

Partition values live in directory names, so a reader that knows nothing of
this module gets them back as strings or categoricals. `read_runs` restores
them to the types the sweep wrote, from the column types recorded in the
manifest (`sweep.json`: `runs_partitioning`), puts the columns back in their
written order and sorts the rows by `run_index`, so it returns exactly the
table `runs_table` built.

Directories here are replaced as a whole; anything in them that this module
did not write is refused, never deleted (see `check_owned`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

_OWNED_FILE = re.compile(r"^(part-\d+\.parquet|_SUCCESS)$")
_OWNED_DIR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$")

# pandas extension dtype of a partition column -> the Arrow type it is read as.
_ARROW_TYPES = {
    "object": "string", "string": "string", "Int64": "int64", "Float64": "double",
    "boolean": "bool",
}


class StoreError(ValueError):
    """An output directory cannot be written or read; the message names it."""


@dataclass(frozen=True, slots=True)
class PartitionColumn:
    name: str
    dtype: str  # the pandas dtype the column had when written ("object", "Int64", ...)


def partition_columns(runs: pd.DataFrame) -> list[PartitionColumn]:
    """`scenario`, then every `param_*` column, in table order."""
    names = ["scenario", *[c for c in runs.columns if c.startswith("param_")]]
    columns = []
    for name in names:
        dtype = str(runs[name].dtype)
        if dtype not in _ARROW_TYPES:
            raise StoreError(f"partition column {name!r} has unsupported type {dtype}")
        columns.append(PartitionColumn(name, dtype))
    return columns


def check_owned(target: Path) -> None:
    """Refuse `target` if it holds anything a sweep's writer would not have written."""
    if not target.exists():
        return
    if not target.is_dir():
        raise StoreError(f"{target} exists and is not a directory")
    foreign = []
    for path in sorted(target.rglob("*")):
        name_ok = _OWNED_DIR.match(path.name) if path.is_dir() else _OWNED_FILE.match(path.name)
        if not name_ok or path.is_symlink():
            foreign.append(str(path.relative_to(target)))
    if foreign:
        raise StoreError(
            f"{target} holds files this sweep did not write ({', '.join(foreign[:3])}); "
            "choose another --out"
        )


def replace_dir(target: Path, write: Callable[[Path], None]) -> None:
    """Write into a fresh sibling directory, then swap it in for `target`."""
    check_owned(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)


def write_runs(directory: Path, runs: pd.DataFrame, columns: list[PartitionColumn]) -> None:
    """Write the per-run table under `directory`, Hive-partitioned by `columns`."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    table = _without_pandas_types(
        pa.Table.from_pandas(runs, preserve_index=False), {c.name for c in columns}
    )
    ds.write_dataset(
        table,
        directory,
        format="parquet",
        partitioning=ds.partitioning(
            pa.schema([table.schema.field(c.name) for c in columns]), flavor="hive"
        ),
        basename_template="part-{i}.parquet",
        existing_data_behavior="error",
    )


def _without_pandas_types(table: pa.Table, names: set[str]) -> pa.Table:
    """Drop the pandas dtypes recorded for the partition columns: their values come
    back from directory names, and pandas cannot apply an Int64 or boolean dtype to
    them, so a plain `pd.read_parquet` of the directory would fail."""
    meta = dict(table.schema.metadata or {})
    if b"pandas" not in meta:
        return table
    pandas_meta = json.loads(meta[b"pandas"])
    pandas_meta["columns"] = [c for c in pandas_meta["columns"] if c["name"] not in names]
    meta[b"pandas"] = json.dumps(pandas_meta).encode()
    return table.replace_schema_metadata(meta)


def manifest_entry(runs: pd.DataFrame, columns: list[PartitionColumn]) -> dict[str, Any]:
    """What `read_runs` needs from `sweep.json` to restore the table exactly."""
    return {
        "columns": list(runs.columns),
        "partition_columns": [{"name": c.name, "dtype": c.dtype} for c in columns],
    }


def _partitioning(entry: Mapping[str, Any]) -> tuple[list[PartitionColumn], list[str]]:
    try:
        columns = [PartitionColumn(p["name"], p["dtype"]) for p in entry["partition_columns"]]
        order = list(entry["columns"])
    except (KeyError, TypeError) as exc:
        raise StoreError(f"sweep.json: 'runs_partitioning' is malformed ({exc})") from exc
    return columns, order


def read_runs(
    out_dir: str | os.PathLike[str],
    *,
    scenario: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The per-run table of the sweep written to `out_dir`, or the part of it for one
    scenario and/or some parameter values (`params`: name without `param_` -> value)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    out = Path(out_dir)
    manifest_path = out / "sweep.json"
    if not manifest_path.is_file():
        raise StoreError(f"{out} is not a sweep's output: it has no sweep.json")
    manifest = json.loads(manifest_path.read_text())
    if "runs_partitioning" not in manifest:
        raise StoreError(
            f"{manifest_path} predates partitioned output; run the sweep again to read it here"
        )
    columns, order = _partitioning(manifest["runs_partitioning"])
    schema = pa.schema([(c.name, _ARROW_TYPES[c.dtype]) for c in columns])
    dataset = ds.dataset(
        out / "runs", format="parquet", partitioning=ds.partitioning(schema, flavor="hive")
    )
    wanted = {"scenario": scenario} if scenario is not None else {}
    wanted |= {f"param_{k}": v for k, v in (params or {}).items()}
    known = {c.name for c in columns}
    expr = None
    for name, value in wanted.items():
        if name not in known:
            raise StoreError(f"{name!r} is not a partition column (have: {', '.join(known)})")
        term = ds.field(name) == value
        expr = term if expr is None else expr & term
    frame = dataset.to_table(filter=expr).to_pandas()
    for c in columns:
        frame[c.name] = frame[c.name].astype(c.dtype)
    frame = frame[order].sort_values("run_index", kind="stable").reset_index(drop=True)
    return frame
