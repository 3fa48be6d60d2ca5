"""Launch variants of the skinny weight-GEMM kernels: the registry, the tile tables that feed it, the
sweep's analytic tables, and (GPU) that every tiles-per-warp choice gives the same bits."""
from __future__ import annotations

import json

import pytest
import torch

import qwen38_kernels  # noqa: F401
from qwen38_kernels import _C, shapes, sweep, tables

OPS = ("nvfp4_linear", "fp8_block_linear")


@pytest.fixture
def clean_registry():
    saved = {op: {(s.n, s.k): _C.skinny_variant(op, s.n, s.k) for s in shapes.WEIGHT_SHAPES} for op in OPS}
    yield
    for op in OPS:
        _C.clear_skinny_variants(op)
        for (n, k), (ks, ntn, ntw, from_table) in saved[op].items():
            if from_table:
                _C.set_skinny_variant(op, n, k, ks, ntn, ntw)


@pytest.mark.parametrize("n,k", [(s.n, s.k) for s in shapes.WEIGHT_SHAPES] + [(8, 32), (200, 272), (1, 999999)])
def test_default_rule_is_valid_and_depends_on_shape_only(n, k):
    ks, ntn, ntw = _C.skinny_default_variant(n, k)
    assert ks in (1, 2, 4, 8) and ntn in (1, 2, 4) and ntw in (1, 2) and ntw <= ntn
    assert _C.skinny_default_variant(n, k) == (ks, ntn, ntw)
    steps = -(-k // 128)
    assert ks == 1 or steps >= 4 * ks  # every warp keeps at least 4 steps of 128 k


def test_registry_set_lookup_clear(clean_registry):
    _C.clear_skinny_variants("nvfp4_linear")
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120)[3] is False
    _C.set_skinny_variant("nvfp4_linear", 1000, 5120, 4, 2, 1)
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (4, 2, 1, True)
    assert _C.skinny_variant("fp8_block_linear", 1000, 5120)[3] is False  # per op
    _C.clear_skinny_variants("nvfp4_linear")
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (*_C.skinny_default_variant(1000, 5120), False)


@pytest.mark.parametrize("args,match", [
    (("nvfp4_linear", 8, 32, 3, 1, 1), "ksplit"),
    (("nvfp4_linear", 8, 32, 4, 8, 1), "nt_narrow"),
    (("nvfp4_linear", 8, 32, 16, 1, 1), "ksplit"),
    (("nvfp4_linear", 8, 32, 4, 4, 8), "nt_wide"),
    (("nvfp4_linear", 8, 32, 4, 4, 3), "nt_wide"),
    (("nvfp4_linear", 0, 32, 4, 1, 1), "positive"),
    (("gemm", 8, 32, 4, 1, 1), "op must be"),
])
def test_registry_rejects_bad_variants(args, match, clean_registry):
    with pytest.raises(ValueError, match=match):
        _C.set_skinny_variant(*args)


@pytest.mark.parametrize("name,ok", [("ks4_nt2", True), ("ks8_nt1", True), ("ks16_nt1", False), ("ks3_nt2", False),
                                     ("ks4_nt8", False), ("ks4", False), (4, False)])
def test_parse_variant(name, ok):
    if ok:
        assert tables.parse_variant(name) == (int(name[2:].split("_")[0]), int(name.split("nt")[1]))
    else:
        with pytest.raises(tables.TableError):
            tables.parse_variant(name)


def _write_table(root, arch, name, entries, extra=None):
    t = {"_doc": ["test table"], "schema_version": 1, "op": name, "arch": arch,
         "provenance": {"tool": "test", "device": "none", "date": "2026-11-29", "metric": "none"},
         "default": {"variant": "ks1_nt1"}, "entries": entries}
    (root / arch).mkdir(parents=True, exist_ok=True)
    (root / arch / f"{name}.json").write_text(json.dumps(t))


def test_tables_feed_the_registry(tmp_path, monkeypatch, clean_registry):
    _write_table(tmp_path, "sm_99", "nvfp4_skinny", {"1000,5120": {"variant": "ks4_nt2"}, "48,5120": {"variant": "ks8_nt1"}})
    _write_table(tmp_path, "sm_99", "nvfp4_skinny_wide", {"1000,5120": {"variant": "ks4_nt1"}})
    _write_table(tmp_path, "sm_99", "fp8_block", {"1000,5120": {"variant": "ks2_nt4", "variant_wide": "ks2_nt2"}})
    monkeypatch.setattr(tables, "table_dirs", lambda: [tmp_path])
    tables.load.cache_clear()
    try:
        assert tables.register_skinny_tables("sm_99") == 3
        assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (4, 2, 1, True)
        assert _C.skinny_variant("nvfp4_linear", 48, 5120) == (8, 1, 1, True)  # no wide entry: narrow's nt / 2
        assert _C.skinny_variant("fp8_block_linear", 1000, 5120) == (2, 4, 2, True)
    finally:
        tables.load.cache_clear()


def test_tables_with_different_k_splits_are_refused(tmp_path, monkeypatch):
    _write_table(tmp_path, "sm_99", "nvfp4_skinny", {"1000,5120": {"variant": "ks4_nt2"}})
    _write_table(tmp_path, "sm_99", "nvfp4_skinny_wide", {"1000,5120": {"variant": "ks2_nt2"}})
    monkeypatch.setattr(tables, "table_dirs", lambda: [tmp_path])
    tables.load.cache_clear()
    try:
        with pytest.raises(tables.TableError, match="split k differently"):
            tables.skinny_variants("sm_99", "nvfp4_linear")
    finally:
        tables.load.cache_clear()


def test_analytic_sm121_tables(tmp_path):
    sweep.run_analytic("sm_121", tmp_path)
    for name in ("nvfp4_skinny", "nvfp4_skinny_wide", "fp8_block"):
        t = json.loads((tmp_path / "sm_121" / f"{name}.json").read_text())
        tables.validate(t)
        assert t["provenance"]["analytic"] is True and "analytic" in t["provenance"]["metric"]
        assert set(t["entries"]) == {f"{s.n},{s.k}" for s in shapes.WEIGHT_SHAPES}
        for key, e in t["entries"].items():
            n, k = map(int, key.split(","))
            ks, _ = tables.parse_variant(e["variant"])
            assert ks == _C.skinny_default_variant(n, k)[0]  # same sums as every other table


def test_shipped_tables_are_valid_and_complete():
    for (arch, op), _ in tables.find_tables().items():
        t = tables.load(arch, op)
        if op in ("nvfp4_skinny", "nvfp4_skinny_wide", "fp8_block"):
            assert set(t["entries"]) >= {f"{s.n},{s.k}" for s in shapes.WEIGHT_SHAPES}, f"{arch}/{op}"
    for arch in {a for (a, _) in tables.find_tables()}:
        for op in OPS:
            for (n, k), (ks, _, _) in tables.skinny_variants(arch, op).items():
                assert ks == _C.skinny_default_variant(n, k)[0], f"{arch} {op} {n}x{k}"


# ---- GPU: every tiles-per-warp choice gives the same bits ---------------------------------------
def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n,k", [(1024, 5120), (200, 288), (48, 5120), (5120, 6144)])
def test_every_nt_gives_the_same_bits(op, n, k, clean_registry):
    w = sweep.make_weights(op, n, k, seed=n + k)
    x = torch.randn(32, k, device="cuda", dtype=torch.bfloat16)
    f = getattr(torch.ops.qwen38, op)
    ks, _, _ = _C.skinny_default_variant(n, k)
    outs = {}
    for nt in (1, 2, 4):
        _C.set_skinny_variant(op, n, k, ks, nt, nt)  # 17..32 rows at 4 tiles a warp too
        outs[nt] = [f(x[:m], *w) for m in (1, 7, 16, 17, 32)]
    for nt in (2, 4):
        for a, b in zip(outs[1], outs[nt]):
            assert torch.equal(_bits(a), _bits(b)), f"nt {nt}"
