"""knobs.py: overrides restore, unknown names raise, and KNOBS.md lists exactly the knobs in code."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from qwen38_kernels import knobs

KNOBS_MD = Path(__file__).resolve().parents[1] / "KNOBS.md"
# a table row whose first cell is a knob name, optionally in backticks: | `QWEN38_X` | default | meaning |
_ROW = re.compile(r"^\|\s*`?(QWEN38_[A-Z0-9_]+)`?\s*\|([^|]*)\|(.*)\|\s*$")


def _md_table() -> dict[str, tuple[str, str]]:
    assert KNOBS_MD.is_file(), f"{KNOBS_MD.name} is missing at the repository root"
    rows = {}
    for line in KNOBS_MD.read_text().splitlines():
        m = _ROW.match(line.strip())
        if m:
            name, default, meaning = m.group(1), m.group(2).strip().strip("`\"'"), m.group(3).strip()
            assert name not in rows, f"{name} is listed twice in KNOBS.md"
            rows[name] = (default, meaning)
    return rows


def test_every_knob_is_documented_and_vice_versa():
    md = _md_table()
    missing = sorted(set(knobs.KNOBS) - set(md))
    extra = sorted(set(md) - set(knobs.KNOBS))
    assert not missing, f"knobs in knobs.KNOBS but not in KNOBS.md: {missing}"
    assert not extra, f"knobs in KNOBS.md but not in knobs.KNOBS: {extra}"


def test_documented_defaults_match_the_code():
    md = _md_table()
    for name, knob in knobs.KNOBS.items():
        if name in md:
            assert md[name][0] == knob.default, \
                f"{name}: KNOBS.md says default {md[name][0]!r}, knobs.py {knob.default!r}"
            assert md[name][1], f"{name}: KNOBS.md gives no meaning"


def test_knob_names_and_defaults_are_well_formed():
    for name, knob in knobs.KNOBS.items():
        assert name == knob.name and re.fullmatch(r"QWEN38_[A-Z0-9_]+", name)
        assert knob.meaning


def test_override_sets_and_restores(monkeypatch):
    monkeypatch.delenv("QWEN38_FUSED_NORM", raising=False)
    monkeypatch.setenv("QWEN38_STRICT_TABLES", "1")
    assert knobs.get("QWEN38_FUSED_NORM") == knobs.KNOBS["QWEN38_FUSED_NORM"].default
    with knobs.override(QWEN38_FUSED_NORM="0", QWEN38_STRICT_TABLES=False):
        assert knobs.get("QWEN38_FUSED_NORM") == "0" and not knobs.enabled("QWEN38_FUSED_NORM")
        assert knobs.get("QWEN38_STRICT_TABLES") == "0"
        with knobs.override(QWEN38_FUSED_NORM=True):
            assert knobs.enabled("QWEN38_FUSED_NORM")
        assert not knobs.enabled("QWEN38_FUSED_NORM")
    assert "QWEN38_FUSED_NORM" not in os.environ  # unset before: unset again
    assert os.environ["QWEN38_STRICT_TABLES"] == "1"


def test_override_restores_after_an_exception(monkeypatch):
    monkeypatch.setenv("QWEN38_FUSED_NORM", "1")
    with pytest.raises(RuntimeError, match="inside"):
        with knobs.override(QWEN38_FUSED_NORM="0"):
            raise RuntimeError("inside")
    assert os.environ["QWEN38_FUSED_NORM"] == "1"


def test_unknown_knob_raises(monkeypatch):
    monkeypatch.delenv("QWEN38_FUSED_NORM", raising=False)
    with pytest.raises(KeyError, match="QWEN38_NO_SUCH_KNOB"):
        knobs.get("QWEN38_NO_SUCH_KNOB")
    with pytest.raises(KeyError, match="QWEN38_NO_SUCH_KNOB"):
        with knobs.override(QWEN38_FUSED_NORM="0", QWEN38_NO_SUCH_KNOB="1"):
            pass
    assert "QWEN38_FUSED_NORM" not in os.environ  # nothing was set by the failed override


def test_bad_value_raises(monkeypatch):
    monkeypatch.setenv("QWEN38_FUSED_NORM", "maybe")
    with pytest.raises(ValueError, match="QWEN38_FUSED_NORM"):
        knobs.enabled("QWEN38_FUSED_NORM")


def test_in_force_lists_every_knob():
    assert set(knobs.in_force()) == set(knobs.KNOBS)


def test_suite_runs_with_strict_tables():
    assert knobs.enabled("QWEN38_STRICT_TABLES"), "tests/conftest.py sets QWEN38_STRICT_TABLES=1"
