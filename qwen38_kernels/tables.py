"""Tile tables: per (arch, op) JSON files keyed by weight shape "N,K" (never by row count).

Layout of a table (``tables/<arch>/<op>.json`` in the repository, shipped as package data)::

    {
      "_doc": ["what this file is", "how to regenerate it"],
      "schema_version": 1,
      "op": "nvfp4_skinny",
      "arch": "sm_90",
      "provenance": {"tool": "...", "device": "...", "date": "...", "metric": "...",
                     "analytic": false},
      "default": {"variant": "..."},
      "entries": {"34816,5120": {"variant": "...", ...}, ...}
    }

A shape with no entry gets ``default`` and one warning; with QWEN38_STRICT_TABLES=1 (the tests) it
raises instead.
"""
from __future__ import annotations

import functools
import json
import re
import warnings
from pathlib import Path

from . import knobs

SCHEMA_VERSION = 1
_SHAPE_KEY = re.compile(r"^[1-9][0-9]*,[1-9][0-9]*$")
_PROVENANCE_KEYS = ("tool", "device", "date", "metric")


class TableError(ValueError):
    pass


def table_dirs() -> list[Path]:
    """Where tables are looked for: the installed package data, then the repository's tables/."""
    here = Path(__file__).resolve().parent
    dirs = [here / "tables", here.parent / "tables"]
    return [d for d in dirs if d.is_dir()]


def find_tables() -> dict[tuple[str, str], Path]:
    """{(arch, op): path} of every table found (the package data wins over the repository copy)."""
    found: dict[tuple[str, str], Path] = {}
    for d in reversed(table_dirs()):
        for p in sorted(d.glob("*/*.json")):
            found[(p.parent.name, p.stem)] = p
    return dict(sorted(found.items()))


def validate(table: dict, where: str = "table") -> None:
    """Raises TableError naming the first problem of a parsed table."""
    def bad(msg):
        raise TableError(f"{where}: {msg}")

    if not isinstance(table, dict):
        bad("must be a JSON object")
    doc = table.get("_doc")
    if not (isinstance(doc, list) and doc and all(isinstance(s, str) for s in doc)):
        bad("_doc must be a non-empty list of strings saying what the file is and how to regenerate it")
    if table.get("schema_version") != SCHEMA_VERSION:
        bad(f"schema_version must be {SCHEMA_VERSION}, got {table.get('schema_version')!r}")
    for k in ("op", "arch"):
        if not isinstance(table.get(k), str):
            bad(f"{k} must be a string")
    prov = table.get("provenance")
    if not isinstance(prov, dict) or any(k not in prov for k in _PROVENANCE_KEYS):
        bad(f"provenance must hold {', '.join(_PROVENANCE_KEYS)}")
    if not isinstance(table.get("default"), dict) or "variant" not in table["default"]:
        bad("default must be an object with a variant")
    entries = table.get("entries")
    if not isinstance(entries, dict):
        bad("entries must be an object keyed by \"N,K\"")
    for key, entry in entries.items():
        if not _SHAPE_KEY.match(key):
            bad(f"entry key {key!r} is not \"N,K\" (weight shape; tables are never keyed by rows)")
        if not isinstance(entry, dict) or not isinstance(entry.get("variant"), str):
            bad(f"entry {key} must be an object with a variant name")
        parse_prefill_rows(entry, f"{where}: entry {key}")


@functools.lru_cache(maxsize=None)
def load(arch: str, op: str) -> dict | None:
    path = find_tables().get((arch, op))
    if path is None:
        return None
    with open(path) as f:
        table = json.load(f)
    validate(table, str(path.name if path.parent.name != arch else f"{arch}/{path.name}"))
    return table


_warned: set[tuple[str, str, int, int]] = set()


def lookup(arch: str, op: str, n: int, k: int) -> dict:
    """The entry for weight shape (n, k); the table's default (one warning) when there is none."""
    table = load(arch, op)
    if table is None:
        raise TableError(f"no tile table {arch}/{op}.json in {', '.join(map(str, table_dirs())) or '(none)'}")
    entry = table["entries"].get(f"{n},{k}")
    if entry is not None:
        return entry
    msg = f"{arch}/{op}.json has no entry for weight shape {n}x{k}; using the default variant"
    if knobs.enabled("QWEN38_STRICT_TABLES"):
        raise TableError(msg)
    if (arch, op, n, k) not in _warned:
        _warned.add((arch, op, n, k))
        warnings.warn(msg, stacklevel=2)
    return table["default"]


# ---- the skinny weight-GEMM kernels' variants ---------------------------------------------------
# nvfp4_skinny.json (1..16 rows) and nvfp4_skinny_wide.json (17..32 rows) hold variants
# "ks<K>_nt<T>": K warps split each weight row's k range (fixes the fp32 sum order: the two tables
# must agree on it for every shape), T 8-row tiles per warp (no effect on any sum). fp8_block.json
# holds "variant" (1..16 rows) and "variant_wide" (17..32 rows) per shape. An entry of nvfp4_skinny.json
# or fp8_block.json may hold "prefill_rows": the row count (more than 32) from which the op's auto
# prefill choice leaves the 32-row slices of the skinny kernel for its prefill strategy (NVFP4:
# dequantize + one GEMM; FP8: the tensor-core kernel), measured per shape by the sweep; without it the
# op's built-in rule decides.
_VARIANT = re.compile(r"^ks(1|2|4|8)_nt(1|2|4)$")
SKINNY_TABLES = {"nvfp4_linear": ("nvfp4_skinny", "nvfp4_skinny_wide"), "fp8_block_linear": ("fp8_block", None)}


def parse_variant(name: str, where: str = "variant") -> tuple[int, int]:
    """"ks4_nt2" -> (4, 2); TableError for anything else."""
    m = _VARIANT.match(name) if isinstance(name, str) else None
    if m is None:
        raise TableError(f"{where}: {name!r} is not a skinny variant 'ks<1|2|4|8>_nt<1|2|4>'")
    return int(m.group(1)), int(m.group(2))


def parse_prefill_rows(entry: dict, where: str) -> int:
    """An entry's "prefill_rows" (an int above 32), or 0 when it has none; TableError otherwise."""
    rows = entry.get("prefill_rows", 0)
    if "prefill_rows" in entry and (isinstance(rows, bool) or not isinstance(rows, int) or rows <= 32):
        raise TableError(f"{where}: prefill_rows must be an integer above 32 (rows from which the prefill "
                         f"strategy serves), got {rows!r}")
    return rows


def wide_variant(entry: dict, wide_entry: dict | None, separate: bool, where: str = "table") -> tuple[int, int]:
    """(ksplit, nt_wide) for 17..32 rows of a 1..16-row table entry: with one table (``separate``
    False: FP8) its variant_wide, else its variant; with a separate 17..32-row table (NVFP4) that
    table's entry, else the narrow k split and max(1, min(2, nt_narrow // 2))."""
    if not separate:
        return parse_variant(entry.get("variant_wide", entry["variant"]), where)
    if wide_entry is not None:
        return parse_variant(wide_entry["variant"], where)
    ks, ntn = parse_variant(entry["variant"], where)
    return ks, max(1, min(2, ntn // 2))


def skinny_variants(arch: str, op: str) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """{(N, K): (ksplit, nt_narrow, nt_wide, prefill_rows)} from the tables of ``op`` for ``arch``
    (empty when none; prefill_rows 0 where the entry has none)."""
    narrow_name, wide_name = SKINNY_TABLES[op]
    narrow = load(arch, narrow_name)
    if narrow is None:
        return {}
    wide = load(arch, wide_name) if wide_name else None
    out = {}
    for key, entry in narrow["entries"].items():
        n, k = (int(v) for v in key.split(","))
        ks, ntn = parse_variant(entry["variant"], f"{arch}/{narrow_name}.json {key}")
        wide_entry = wide["entries"].get(key) if wide is not None else None
        wks, ntw = wide_variant(entry, wide_entry, wide_name is not None,
                                f"{arch}/{wide_name or narrow_name}.json {key}")
        if wks != ks:
            raise TableError(f"{arch}: {key}: the 1..16-row and 17..32-row variants split k differently "
                             f"(ks{ks} vs ks{wks}); rows would stop being bit-identical to their 1-row call")
        out[(n, k)] = (ks, ntn, ntw, parse_prefill_rows(entry, f"{arch}/{narrow_name}.json {key}"))
    return out


def register_skinny_tables(arch: str | None = None) -> int:
    """Registers the skinny kernels' table entries for ``arch`` (default: the current CUDA device's,
    e.g. "sm_90") with the extension; returns the number of shapes registered. Called at import."""
    from . import _C
    if arch is None:
        import torch
        if not torch.cuda.is_available():
            return 0
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
    count = 0
    for op in SKINNY_TABLES:
        _C.clear_skinny_variants(op)
        for (n, k), (ks, ntn, ntw, prefill_rows) in skinny_variants(arch, op).items():
            _C.set_skinny_variant(op, n, k, ks, ntn, ntw, prefill_rows)
            count += 1
    return count
