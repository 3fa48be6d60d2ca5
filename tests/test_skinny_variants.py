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
        for (n, k), (ks, ntn, ntw, prefill_rows, from_table) in saved[op].items():
            if from_table:
                _C.set_skinny_variant(op, n, k, ks, ntn, ntw, prefill_rows)


@pytest.mark.parametrize("n,k", [(s.n, s.k) for s in shapes.WEIGHT_SHAPES] + [(8, 32), (200, 272), (1, 999999)])
def test_default_rule_is_valid_and_depends_on_shape_only(n, k):
    ks, ntn, ntw = _C.skinny_default_variant(n, k)
    assert ks in (1, 2, 4, 8) and ntn in (1, 2, 4) and ntw in (1, 2, 4) and ntw <= ntn
    assert _C.skinny_default_variant(n, k) == (ks, ntn, ntw)
    steps = -(-k // 128)
    assert ks == 1 or steps >= 4 * ks  # every warp keeps at least 4 steps of 128 k


@pytest.mark.parametrize("n", [248320, 32768, 8192])
def test_default_rule_of_large_k5120_weights_is_the_tables(n):
    """K = 5120 weights of N >= 8192 not in the tables (the output head, a draft vocabulary) get what every
    table entry of that kind chose: k split 4, 4 tiles a warp at both row ranges. Before session 39 the
    248320-row head took k split 1 (the ring kernel) and such shapes 2 tiles at 17..32 rows."""
    assert _C.skinny_default_variant(n, 5120) == (4, 4, 4)
    for arch in ("sm_90", "sm_121"):
        for name in ("nvfp4_skinny", "nvfp4_skinny_wide"):
            for key, entry in tables.load(arch, name)["entries"].items():
                nn, kk = map(int, key.split(","))
                if kk == 5120 and nn >= 8192:
                    assert tables.parse_variant(entry["variant"])[:2] == (4, 4), (arch, name, key)


def test_registry_set_lookup_clear(clean_registry):
    _C.clear_skinny_variants("nvfp4_linear")
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120)[4] is False
    _C.set_skinny_variant("nvfp4_linear", 1000, 5120, 4, 2, 1)
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (4, 2, 1, 0, True)  # prefill_rows 0: the rule
    _C.set_skinny_variant("nvfp4_linear", 1000, 5120, 4, 2, 1, 96)
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (4, 2, 1, 96, True)
    assert _C.skinny_variant("fp8_block_linear", 1000, 5120)[4] is False  # per op
    _C.clear_skinny_variants("nvfp4_linear")
    assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (*_C.skinny_default_variant(1000, 5120), 0, False)


@pytest.mark.parametrize("args,match", [
    (("nvfp4_linear", 8, 32, 3, 1, 1), "ksplit"),
    (("nvfp4_linear", 8, 32, 4, 8, 1), "nt_narrow"),
    (("nvfp4_linear", 8, 32, 16, 1, 1), "ksplit"),
    (("nvfp4_linear", 8, 32, 4, 4, 8), "nt_wide"),
    (("nvfp4_linear", 8, 32, 4, 4, 3), "nt_wide"),
    (("nvfp4_linear", 0, 32, 4, 1, 1), "positive"),
    (("gemm", 8, 32, 4, 1, 1), "op must be"),
    (("nvfp4_linear", 8, 32, 4, 1, 1, 32), "prefill_rows"),
    (("fp8_block_linear", 8, 32, 4, 1, 1, -5), "prefill_rows"),
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
    _write_table(tmp_path, "sm_99", "nvfp4_skinny", {"1000,5120": {"variant": "ks4_nt2", "prefill_rows": 80},
                                                     "48,5120": {"variant": "ks8_nt1"}})
    _write_table(tmp_path, "sm_99", "nvfp4_skinny_wide", {"1000,5120": {"variant": "ks4_nt1"}})
    _write_table(tmp_path, "sm_99", "fp8_block", {"1000,5120": {"variant": "ks2_nt4", "variant_wide": "ks2_nt2",
                                                               "prefill_rows": 65}})
    monkeypatch.setattr(tables, "table_dirs", lambda: [tmp_path])
    tables.load.cache_clear()
    try:
        assert tables.register_skinny_tables("sm_99") == 3
        assert _C.skinny_variant("nvfp4_linear", 1000, 5120) == (4, 2, 1, 80, True)
        assert _C.skinny_variant("nvfp4_linear", 48, 5120) == (8, 1, 1, 0, True)  # no wide entry: narrow's nt / 2
        assert _C.skinny_variant("fp8_block_linear", 1000, 5120) == (2, 4, 2, 65, True)
    finally:
        tables.load.cache_clear()


@pytest.mark.parametrize("rows", [32, 0, -1, 64.0, "65", True])
def test_tables_with_bad_prefill_rows_are_refused(tmp_path, monkeypatch, rows):
    _write_table(tmp_path, "sm_99", "fp8_block", {"1000,5120": {"variant": "ks2_nt4", "prefill_rows": rows}})
    monkeypatch.setattr(tables, "table_dirs", lambda: [tmp_path])
    tables.load.cache_clear()
    try:
        with pytest.raises(tables.TableError, match="prefill_rows must be an integer above 32"):
            tables.skinny_variants("sm_99", "fp8_block_linear")
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


@pytest.mark.parametrize("op", OPS)
def test_prefill_only_updates_the_crossover_alone(op, tmp_path):
    """sweep --prefill-only: every entry of the measured table is re-measured with its own variants
    (narrow ones from the entry, the wide tile count from the wide table or variant_wide), only
    prefill_rows / prefill_us change, the provenance names the shapes and keeps what came before, and
    the table is rewritten after each shape: a run stopped midway keeps the shapes done. An analytic
    or missing table is refused."""
    import shutil
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "tables" / "sm_90"
    (tmp_path / "sm_90").mkdir()
    for f in src.glob("*.json"):
        shutil.copy(f, tmp_path / "sm_90" / f.name)
    name = "nvfp4_skinny" if op == "nvfp4_linear" else "fp8_block"
    path = tmp_path / "sm_90" / f"{name}.json"
    old = json.loads(path.read_text())
    wide = json.loads((src / "nvfp4_skinny_wide.json").read_text())["entries"]
    calls = []

    def fake(op_, n, k, variant, quick):
        calls.append((op_, n, k, variant, quick))
        if len(calls) == 3 and not quick:
            raise KeyboardInterrupt  # stopped midway
        return {"prefill_rows": 96 + len(calls), "us": {64: {"chunked": 1.0 * n, "x": 2.0}}}

    with pytest.raises(KeyboardInterrupt):
        sweep.run_prefill_only(op, tmp_path, "sm_90", False, fake)
    mid = json.loads(path.read_text())
    keys = list(old["entries"])
    assert [mid["entries"][k]["prefill_rows"] for k in keys[:2]] == [97, 98]
    assert all(mid["entries"][k] == old["entries"][k] for k in keys[2:])
    assert mid["provenance"]["prefill"].startswith(f"prefill_rows / prefill_us of {keys[0]}; {keys[1]}: ")
    calls.clear()
    sweep.run_prefill_only(op, tmp_path, "sm_90", True, fake)
    new = json.loads(path.read_text())
    tables.validate(new)
    assert len(calls) == len(keys) and all(c[4] for c in calls)
    for (o, n, k, variant, _), key in zip(calls, keys):
        e_old, e_new = old["entries"][key], new["entries"][key]
        ks, ntn = tables.parse_variant(e_old["variant"])
        wv = wide[key]["variant"] if op == "nvfp4_linear" else e_old["variant_wide"]
        assert (o, f"{n},{k}", variant) == (op, key, (ks, ntn, tables.parse_variant(wv)[1]))
        assert {f: v for f, v in e_new.items() if not f.startswith("prefill")} == \
            {f: v for f, v in e_old.items() if not f.startswith("prefill")}
        assert e_new["prefill_us"] == {"64": {"chunked": float(n), "x": 2.0}}
    assert [new["entries"][k]["prefill_rows"] for k in keys] == list(range(97, 97 + len(keys)))
    assert {f: v for f, v in new["provenance"].items() if f != "prefill"} == \
        {f: v for f, v in old["provenance"].items() if f != "prefill"}
    prov = new["provenance"]["prefill"]
    assert prov.startswith(f"prefill_rows / prefill_us of {'; '.join(keys)}: ") and "--prefill-only --quick" in prov
    assert old["provenance"].get("prefill", "the full sweep") in prov or "the full sweep" in prov
    with pytest.raises(SystemExit, match="no table"):
        sweep.run_prefill_only(op, tmp_path, "sm_80", True, fake)
    sweep.run_analytic("sm_121", tmp_path)
    with pytest.raises(SystemExit, match="analytic"):
        sweep.run_prefill_only(op, tmp_path, "sm_121", True, fake)


def test_shipped_tables_are_valid_and_complete():
    for (arch, op), _ in tables.find_tables().items():
        t = tables.load(arch, op)
        if op in ("nvfp4_skinny", "nvfp4_skinny_wide", "fp8_block"):
            assert set(t["entries"]) >= {f"{s.n},{s.k}" for s in shapes.WEIGHT_SHAPES}, f"{arch}/{op}"
    for arch in {a for (a, _) in tables.find_tables()}:
        for op in OPS:
            for (n, k), (ks, _, _, _) in tables.skinny_variants(arch, op).items():
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


def test_sweep_crossover_rule():
    """prefill_rows: the smallest measured row count from which the prefill strategy wins at every
    larger measured count; one past the largest when it loses there."""
    us = {64: {"chunked": 215.0, "mma": 256.0}, 65: {"chunked": 270.0, "mma": 256.0}, 128: {"chunked": 430.0, "mma": 260.0}}
    assert sweep.crossover(us, "mma") == 65
    us[65]["chunked"] = 250.0  # a loss at 65: the win at 128 alone counts
    assert sweep.crossover(us, "mma") == 128
    us[128]["mma"] = 431.0
    assert sweep.crossover(us, "mma") == 129
    us = {48: {"chunked": 9.0, "dequant": 8.0}, 64: {"chunked": 12.0, "dequant": 8.5}}
    assert sweep.crossover(us, "dequant") == 48


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_table_prefill_rows_moves_the_auto_switch(op, clean_registry):
    """A shape's prefill_rows (as the tables register it) is where auto leaves the 32-row slices:
    one row below it every row is its 1-row call's bits, at it the output is the forced prefill
    strategy's (which differ from the slices' somewhere)."""
    from qwen38_kernels import knobs
    n, k, at = 1024, 5120, 40
    w = sweep.make_weights(op, n, k, seed=3)
    x = torch.randn(at, k, device="cuda", dtype=torch.bfloat16)
    f = getattr(torch.ops.qwen38, op)
    ks, ntn, ntw = _C.skinny_default_variant(n, k)
    _C.set_skinny_variant(op, n, k, ks, ntn, ntw, at)
    assert _C.skinny_variant(op, n, k)[3] == at
    below = f(x[:at - 1], *w)
    for r in (0, 32, at - 2):
        assert torch.equal(_bits(below[r:r + 1]), _bits(f(x[r:r + 1], *w))), f"{op}: {at - 1} rows, row {r}"
    knob, strategy = sweep.PREFILL_KNOB[op]
    y = f(x, *w)
    with knobs.override(**{knob: strategy}):
        assert torch.equal(_bits(y), _bits(f(x, *w))), f"{op}: auto at {at} rows is not the {strategy} strategy"
    with knobs.override(**{knob: "chunked"}):
        assert not torch.equal(_bits(y), _bits(f(x, *w))), f"{op}: auto at {at} rows took the slices"


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n,k", [(12288, 5120), (1024, 5120), (200, 288)])
def test_spread_gives_the_same_bits(op, n, k):
    """QWEN38_SPREAD (default 1: grids under one wave launched with unread shared memory capping the
    CTAs an SM: csrc/common/launch.cuh) changes no bit against 0, through the stream kernel
    (12288x5120) and the skinny kernel, with and without PDL."""
    from qwen38_kernels import knobs
    w = sweep.make_weights(op, n, k, seed=n)
    x = torch.randn(32, k, device="cuda", dtype=torch.bfloat16)
    f = getattr(torch.ops.qwen38, op)
    with knobs.override(QWEN38_SPREAD="0"):
        ref = [f(x[:m], *w) for m in (1, 16, 17, 32)]
    for pdl in ("1", "0"):
        with knobs.override(QWEN38_SPREAD="1", QWEN38_PDL=pdl):
            got = [f(x[:m], *w) for m in (1, 16, 17, 32)]
        for m, a, b in zip((1, 16, 17, 32), ref, got):
            assert torch.equal(_bits(a), _bits(b)), f"spread, PDL {pdl}, {m} rows"


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n,k,nt", [(48, 5120, 1), (96, 5120, 1), (1024, 5120, 1), (1024, 5120, 4), (512, 5120, 2),
                                    (5120, 6144, 4), (256, 17408, 2)])
def test_cluster_gives_the_same_bits(op, n, k, nt, clean_registry):
    """QWEN38_SKINNY_CLUSTER (auto: a grid of few output tiles spreads each tile's 8 k-split warps over
    the CTAs of a cluster, the partials summed in the first CTA's shared memory in warp order;
    stream_launch.cuh) changes no bit against one CTA a tile (1), for every cluster size, with and
    without PDL, with bias and fp32 output; and the stream kernel's 1-tile form (the model's small
    weights) writes the bits of the ring/skinny kernel. (FP8 carries the cluster form at K = 5120
    only: elsewhere the knob leaves its launch as it is.)"""
    from qwen38_kernels import knobs, testing as qt
    _C.set_skinny_variant(op, n, k, 8, nt, nt)
    w = sweep.make_weights(op, n, k, seed=n + nt)
    bias = qt.randn_nonzero(n, dtype=torch.float32, device="cuda", seed=5)
    x = qt.randn_nonzero(32, k, dtype=torch.bfloat16, device="cuda", seed=n)
    f = getattr(torch.ops.qwen38, op)

    def call(t, b=None, od=None):
        return f(t, *w, b, od)

    extras = ((None, None), (bias, torch.float32))
    for pdl in ("1", "0"):
        with knobs.override(QWEN38_PDL=pdl, QWEN38_SKINNY_CLUSTER="1"):
            for value in ("auto", "2", "4", "8"):
                qt.assert_knob_keeps_bits(call, x, "QWEN38_SKINNY_CLUSTER", value, rows=(1, 9, 16, 17, 32),
                                          extras=extras, what=f"{op} {n}x{k} nt {nt}, PDL {pdl}: ")
    stream_off = {"nvfp4_linear": ("QWEN38_NVFP4_STREAM", "0"), "fp8_block_linear": ("QWEN38_FP8_STREAM", "0")}[op]
    qt.assert_knob_keeps_bits(call, x, *stream_off, rows=(1, 16, 17, 32), extras=extras, what="stream vs ring: ")
    qt.assert_row_invariant(lambda t: call(t), x, max_rows=32)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_bad_cluster_knob_is_named(op):
    from qwen38_kernels import knobs
    w = sweep.make_weights(op, 48, 5120, seed=1)
    x = torch.randn(2, 5120, device="cuda", dtype=torch.bfloat16)
    with knobs.override(QWEN38_SKINNY_CLUSTER="3"), pytest.raises(ValueError, match="QWEN38_SKINNY_CLUSTER"):
        getattr(torch.ops.qwen38, op)(x, *w)
