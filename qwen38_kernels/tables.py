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
