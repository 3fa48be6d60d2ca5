"""Tile-table sweep of the skinny weight-GEMM kernels (nvfp4_linear, fp8_block_linear).

    python -m qwen38_kernels.sweep [--op nvfp4_linear|fp8_block_linear|all] [--out tables] [--quick]
    python -m qwen38_kernels.sweep --analytic sm_121 [--out tables]     # no GPU needed
    python -m qwen38_kernels.sweep --prefill-only [--op ...] [--out tables] [--quick]

For every weight shape of Qwen3.8-27B (``qwen38_kernels.shapes``) the sweep times the compiled
variants (k split x 8-row tiles per warp) on the current GPU at 1 and 16 rows (the 1..16-row table)
and 17 and 32 rows (the 17..32-row table), and keeps only variants whose output is bit-identical to
the default variant's at every row count 1..32. Then, with the chosen variant, it times the op's two
ways past 32 rows - 32-row slices of the skinny kernel, and the prefill strategy (NVFP4: dequantize
+ one GEMM, or on a read-bound GPU the tensor-core kernel; FP8: the tensor-core kernel) - at a few row
counts (and at twice the rows while the strategy still loses) and records per shape the row count
from which the prefill strategy is faster at every larger count measured (``prefill_rows``: the
threshold the op's auto choice takes from the table). It writes ``<out>/<arch>/<table>.json`` with
provenance (device, date, torch, metric) and the times it measured, showing progress as it goes.

``--prefill-only`` re-measures only the prefill crossover (``prefill_rows``, ``prefill_us``) of the
measured tables already in ``<out>/<arch>``, each shape with its table's variants, and rewrites the
table after every shape (a stopped run keeps the shapes done); the provenance names the shapes and
the date. For when the kernels changed since the sweep: the skinny kernel's 32-row slices got faster
and the crossover moved, while its variants' choice did not.

``--analytic ARCH`` writes tables for a GPU that is not here (the GB10, sm_121: 48 SMs, 99 KB of
shared memory per block) from a rule instead of measurements, and says so in ``provenance``. The
k split is always the default rule's (a function of (N, K) only), so an analytic table computes
the same sums as a measured one.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

from . import shapes as _shapes
from . import tables

TABLE_DOC = {
    "nvfp4_skinny": "nvfp4_linear skinny kernel launch variants for 1..16 rows, keyed by weight shape \"N,K\"",
    "nvfp4_skinny_wide": "nvfp4_linear skinny kernel launch variants for 17..32 rows, keyed by weight shape \"N,K\"",
    "fp8_block": "fp8_block_linear skinny kernel launch variants (variant: 1..16 rows, variant_wide: 17..32 rows)",
}
REGEN = "Regenerate: python -m qwen38_kernels.sweep --op {op} --out tables (on the GPU of <arch>)"
REGEN_ANALYTIC = "Regenerate: python -m qwen38_kernels.sweep --analytic {arch} --out tables"
NT_CHOICES = (1, 2, 4)
PREFILL_ROWS = (48, 64, 65, 96, 128, 256)  # row counts the crossover is measured at (--quick: QUICK_PREFILL_ROWS)
QUICK_PREFILL_ROWS = (64, 65, 128)
PREFILL_EXTEND_MAX = 4096  # sweep_prefill doubles the rows up to this while the prefill strategy loses
# the knob and auto's prefill strategy (nvfp4_linear: mma instead on a read-bound GPU, sweep_prefill)
PREFILL_KNOB = {"nvfp4_linear": ("QWEN38_NVFP4_PREFILL", "dequant"), "fp8_block_linear": ("QWEN38_FP8_PREFILL", "mma")}


def _variant(ks: int, nt: int) -> str:
    return f"ks{ks}_nt{nt}"


# ---- inputs ------------------------------------------------------------------------------------
def _random_e4m3_scales(shape, gen, device, lo=0x28, hi=0x48):
    """Positive finite e4m3 codes between 2^-4 and 2^4 (never NaN)."""
    return torch.randint(lo, hi, shape, generator=gen, dtype=torch.int32).to(torch.uint8).view(
        torch.float8_e4m3fn).to(device)


def make_weights(op: str, n: int, k: int, device="cuda", seed: int = 0) -> tuple:
    """Random weights in the op's stored format (codes drawn directly: no quantizer needed)."""
    g = torch.Generator().manual_seed(seed)
    if op == "nvfp4_linear":
        packed = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.int32).to(torch.uint8).to(device)
        scale = _random_e4m3_scales((n, k // 16), g, device)
        return packed, scale, torch.tensor([0.01], device=device)
    codes = torch.randint(0, 256, (n, k), generator=g, dtype=torch.int32).to(torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x38  # NaN codes -> 1.0
    w = codes.view(torch.float8_e4m3fn).to(device)
    sinv = torch.rand(-(-n // 128), -(-k // 128), generator=g).add_(0.5).mul_(1e-2).to(device)
    return w, sinv


def _call(op: str):
    f = getattr(torch.ops.qwen38, op)
    return lambda x, *w: f(x, *w)


def weight_bytes(op: str, n: int, k: int) -> int:
    if op == "nvfp4_linear":
        return n * k // 2 + n * k // 16 + 4
    return n * k + 4 * (-(-n // 128)) * (-(-k // 128))


# ---- the sweep ---------------------------------------------------------------------------------
def _outputs(fn, x, weights) -> list[torch.Tensor]:
    return [fn(x[:m], *weights) for m in range(1, 33)]


def _time(fn, op, n, k, m, weights, x) -> float:
    from . import bench
    copies = bench.rotating_copies(lambda i: tuple(t.clone() for t in weights), weight_bytes(op, n, k))
    return bench.time_calls(lambda *w: fn(x[:m], *w), copies, repeats=5, min_calls=100)


def sweep_shape(op: str, n: int, k: int, quick: bool = False, weights: tuple | None = None) -> dict:
    """Measures the candidates of one shape (on ``weights``, or random ones); returns {"narrow":
    (variant, us), "wide": (...), "default": (ks, ntn, ntw), "candidates": {...}}."""
    from . import _C
    fn = _call(op)
    weights = make_weights(op, n, k) if weights is None else weights
    x = torch.randn(32, k, device="cuda", dtype=torch.bfloat16)
    ks0, ntn0, ntw0 = _C.skinny_default_variant(n, k)
    _C.set_skinny_variant(op, n, k, ks0, ntn0, ntw0)
    ref = _outputs(fn, x, weights)
    cands = {}
    kss = [ks0] if quick else sorted({v for v in (ks0 // 2, ks0, ks0 * 2) if v in (1, 2, 4, 8)})
    for ks in kss:
        for nt in NT_CHOICES:
            _C.set_skinny_variant(op, n, k, ks, nt, nt)
            got = _outputs(fn, x, weights)
            same = all(torch.equal(a.view(torch.int16) if a.dtype != torch.float32 else a.view(torch.int32),
                                   b.view(torch.int16) if b.dtype != torch.float32 else b.view(torch.int32))
                       for a, b in zip(ref, got))
            entry = {"bit_identical": bool(same)}
            if same:
                entry["us"] = {m: round(_time(fn, op, n, k, m, weights, x), 3) for m in (1, 16, 17, 32)}
            cands[_variant(ks, nt)] = entry
    _C.clear_skinny_variants(op)
    ok = {v: e for v, e in cands.items() if e["bit_identical"] and tables.parse_variant(v)[0] == ks0}
    narrow = min(ok, key=lambda v: ok[v]["us"][1] + ok[v]["us"][16])
    ok_wide = {v: e for v, e in ok.items() if 17 in e["us"]}
    wide = min(ok_wide, key=lambda v: ok_wide[v]["us"][17] + ok_wide[v]["us"][32])
    return {"narrow": narrow, "wide": wide, "default": (ks0, ntn0, ntw0), "candidates": cands}


def crossover(us: dict[int, dict[str, float]], strategy: str) -> int:
    """The smallest measured row count from which ``strategy`` beats "chunked" at every larger measured
    count; one past the largest when it loses there (the slices stay the choice as far as measured)."""
    rows = sorted(us)
    first = rows[-1] + 1
    for r in reversed(rows):
        if us[r][strategy] < us[r]["chunked"]:
            first = r
        else:
            break
    return first


def sweep_prefill(op: str, n: int, k: int, variant: tuple[int, int, int], quick: bool = False,
                  weights: tuple | None = None) -> dict:
    """With ``variant`` registered: {"prefill_rows": crossover, "us": {rows: {"chunked": us,
    strategy: us}}} for one shape (on ``weights``, or random ones): at PREFILL_ROWS (or
    QUICK_PREFILL_ROWS), then at twice the largest count while the strategy still loses there, up to
    PREFILL_EXTEND_MAX rows."""
    from . import _C, knobs
    fn = _call(op)
    weights = make_weights(op, n, k) if weights is None else weights
    rows = list(QUICK_PREFILL_ROWS if quick else PREFILL_ROWS)
    x = torch.randn(PREFILL_EXTEND_MAX, k, device="cuda", dtype=torch.bfloat16)
    knob, strategy = PREFILL_KNOB[op]
    if op == "nvfp4_linear" and torch.cuda.get_device_capability()[0] == 12:
        strategy = "mma"  # auto's prefill strategy on a read-bound GPU (csrc/gemm/gemm_host.h)
    _C.set_skinny_variant(op, n, k, *variant)
    us = {}

    def measure(m: int) -> None:
        us[m] = {}
        for s in ("chunked", strategy):
            with knobs.override(**{knob: s}):
                us[m][s] = round(_time(fn, op, n, k, m, weights, x), 3)
    try:
        for m in rows:
            measure(m)
        # where the strategy still loses at the largest count, twice the rows until it wins (narrow
        # weights stream fast in slices while a tensor-core grid of one column tile does not fill the GPU)
        while us[max(us)][strategy] >= us[max(us)]["chunked"] and 2 * max(us) <= PREFILL_EXTEND_MAX:
            measure(2 * max(us))
    finally:
        _C.clear_skinny_variants(op)
    return {"prefill_rows": crossover(us, strategy), "us": us}


def _provenance(analytic: bool, metric: str) -> dict:
    from . import bench
    prov = {"tool": "python -m qwen38_kernels.sweep", "date": datetime.date.today().isoformat(),
            "metric": metric, "analytic": analytic, "torch": torch.__version__}
    prov["device"] = "none (analytic)" if analytic else bench.gpu_name()
    return prov


def _write(path: Path, table: dict) -> None:
    tables.validate(table, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"wrote {path}")


def _table(name: str, arch: str, op: str, prov: dict, entries: dict, default: str, analytic: bool) -> dict:
    regen = (REGEN_ANALYTIC.format(arch=arch) if analytic else REGEN.format(op=op)).replace("<arch>", arch)
    return {"_doc": [TABLE_DOC[name], regen], "schema_version": tables.SCHEMA_VERSION, "op": name, "arch": arch,
            "provenance": prov, "default": {"variant": default}, "entries": entries}


def run_sweep(op: str, out: Path, quick: bool = False) -> None:
    from . import bench
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    metric = ("graph-timed us per call (cold weights, rotating copies) at 1 and 16 rows (narrow), 17 and 32 "
              "rows (wide); only variants bit-identical to the default at every row count 1..32; prefill_rows: "
              "from which measured row count the prefill strategy beats 32-row slices at every larger one")
    results, prefill = {}, {}
    for s in bench.progress(_shapes.WEIGHT_SHAPES, desc=f"sweep {op}", total=len(_shapes.WEIGHT_SHAPES)):
        weights = make_weights(op, s.n, s.k)
        results[s] = r = sweep_shape(op, s.n, s.k, quick, weights)
        ks, ntn = tables.parse_variant(r["narrow"])
        prefill[s] = sweep_prefill(op, s.n, s.k, (ks, ntn, tables.parse_variant(r["wide"])[1]), quick, weights)
    prov = _provenance(False, metric)
    narrow, wide = {}, {}
    for s, r in results.items():
        key = f"{s.n},{s.k}"
        c = r["candidates"]
        narrow[key] = {"variant": r["narrow"], "label": s.label,
                       "us": {v: e["us"] for v, e in c.items() if e["bit_identical"]},
                       "rejected": sorted(v for v, e in c.items() if not e["bit_identical"]),
                       "prefill_rows": prefill[s]["prefill_rows"], "prefill_us": prefill[s]["us"]}
        wide[key] = {"variant": r["wide"], "label": s.label}
    d = "rule: skinny_default_variant(N, K)"
    if op == "nvfp4_linear":
        _write(out / arch / "nvfp4_skinny.json", _table("nvfp4_skinny", arch, op, prov, narrow, d, False))
        _write(out / arch / "nvfp4_skinny_wide.json", _table("nvfp4_skinny_wide", arch, op, prov, wide, d, False))
    else:
        for key in narrow:
            narrow[key]["variant_wide"] = wide[key]["variant"]
        _write(out / arch / "fp8_block.json", _table("fp8_block", arch, op, prov, narrow, d, False))


def run_prefill_only(op: str, out: Path, arch: str, quick: bool = False, measure=None) -> None:
    """Re-measures prefill_rows / prefill_us of every entry of the measured table of ``op`` in
    ``out/arch`` with the entry's variants (``measure(op, n, k, variant, quick)``: sweep_prefill by
    default) and rewrites the table after each shape, its provenance's ``prefill`` naming the shapes
    re-measured and when."""
    from . import bench
    measure = sweep_prefill if measure is None else measure
    name = "nvfp4_skinny" if op == "nvfp4_linear" else "fp8_block"
    path = out / arch / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"--prefill-only: no table {path} to update (run the full sweep first)")
    table = json.loads(path.read_text())
    tables.validate(table, str(path))
    if table["provenance"].get("analytic"):
        raise SystemExit(f"--prefill-only: {path} is analytic (no measured crossover to update)")
    wide = {}  # NVFP4's 17..32-row table (FP8: variant_wide in the same entry)
    wide_path = out / arch / "nvfp4_skinny_wide.json"
    if op == "nvfp4_linear" and wide_path.is_file():
        wide = json.loads(wide_path.read_text())["entries"]
    before = table["provenance"].get("prefill", "prefill_rows / prefill_us: the full sweep's")
    done = []
    entries = table["entries"]
    for key in bench.progress(list(entries), desc=f"prefill crossover {op}", total=len(entries)):
        e = entries[key]
        n, k = (int(v) for v in key.split(","))
        ks, ntn = tables.parse_variant(e["variant"])
        ntw = tables.wide_variant(e, wide.get(key), op == "nvfp4_linear", f"{path} {key}")[1]  # (as the op loads it)
        r = measure(op, n, k, (ks, ntn, ntw), quick)
        e["prefill_rows"], e["prefill_us"] = r["prefill_rows"], r["us"]
        done.append(key)
        how = f"python -m qwen38_kernels.sweep --prefill-only{' --quick' if quick else ''}"
        rows = ", ".join(map(str, QUICK_PREFILL_ROWS if quick else PREFILL_ROWS))
        table["provenance"]["prefill"] = (
            f"prefill_rows / prefill_us of {'; '.join(done)}: {datetime.date.today().isoformat()}, {how} on "
            f"the {bench.gpu_name()} (torch {torch.__version__}; rows {rows}, doubled while the prefill "
            f"strategy loses); before that, and the variants: {before}")
        _write(path, table)


def analytic_variant(n: int, k: int, sms: int) -> tuple[int, int]:
    """(ksplit, nt) for a GPU of ``sms`` SMs: the default k split, and the most tiles per warp that
    still leave >= 8 warps per SM (a 230 GB/s part needs few bytes in flight per SM; more tiles per
    warp amortize the activation loads). 17..32 rows take the same for NVFP4 (4 tiles is what the
    H200 sweep picks for every large shape) and at most 2 for FP8 (its 4-tile wide form holds ~240
    registers)."""
    from . import _C
    ks, _, _ = _C.skinny_default_variant(n, k)
    tiles = -(-n // 8)
    nt = next(t for t in (4, 2, 1) if t == 1 or -(-tiles // t) * ks >= 8 * sms)
    return ks, nt


def run_analytic(arch: str, out: Path) -> None:
    if arch != "sm_121":
        raise SystemExit(f"--analytic knows sm_121 (GB10) only, got {arch}")
    sms = 48
    metric = (f"analytic, not measured: GB10 ({sms} SMs, 99 KB shared memory per block, ~230 GB/s); default "
              "k split, most tiles per warp leaving >= 8 warps per SM (the kernels use <= 16 KB of shared memory); "
              "no prefill_rows: past 32 rows the ops' read-bound rule takes the mma kernels from 33 rows "
              "(prefill_read_bound in csrc/gemm/gemm_host.h)")
    prov = _provenance(True, metric)
    narrow, wide, fp8 = {}, {}, {}
    for s in _shapes.WEIGHT_SHAPES:
        ks, nt = analytic_variant(s.n, s.k, sms)
        key = f"{s.n},{s.k}"
        narrow[key] = {"variant": _variant(ks, nt), "label": s.label}
        wide[key] = {"variant": _variant(ks, nt), "label": s.label}
        fp8[key] = {"variant": _variant(ks, nt), "variant_wide": _variant(ks, min(nt, 2)), "label": s.label}
    d = "rule: skinny_default_variant(N, K)"
    _write(out / arch / "nvfp4_skinny.json", _table("nvfp4_skinny", arch, "nvfp4_linear", prov, narrow, d, True))
    _write(out / arch / "nvfp4_skinny_wide.json",
           _table("nvfp4_skinny_wide", arch, "nvfp4_linear", prov, wide, d, True))
    _write(out / arch / "fp8_block.json", _table("fp8_block", arch, "fp8_block_linear", prov, fp8, d, True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m qwen38_kernels.sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", default="all", choices=["nvfp4_linear", "fp8_block_linear", "all"])
    ap.add_argument("--out", default="tables", type=Path, help="tables directory (default: ./tables)")
    ap.add_argument("--quick", action="store_true",
                    help="only the default k split (no rejected candidates); the prefill crossover at rows 64, 65, 128")
    ap.add_argument("--analytic", metavar="ARCH", help="write analytic tables for ARCH (sm_121) instead")
    ap.add_argument("--prefill-only", action="store_true",
                    help="re-measure only the prefill crossover of the measured tables in --out (their variants kept)")
    a = ap.parse_args(argv)
    if a.analytic:
        run_analytic(a.analytic, a.out)
        return 0
    if not torch.cuda.is_available():
        print("the sweep measures on a CUDA GPU; none is visible (use --analytic for sm_121)", file=sys.stderr)
        return 2
    for op in (["nvfp4_linear", "fp8_block_linear"] if a.op == "all" else [a.op]):
        if a.prefill_only:
            major, minor = torch.cuda.get_device_capability()
            run_prefill_only(op, a.out, f"sm_{major}{minor}", a.quick)
        else:
            run_sweep(op, a.out, a.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
