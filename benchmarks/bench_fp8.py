"""Benchmark the block-FP8 weight GEMM against its peers on the GPU, in one run.

    python benchmarks/bench_fp8.py [--quick] [--out benchmarks/results/<gpu>/]

Op and shapes: ``torch.ops.qwen38.fp8_block_linear(x, w, w_scale_inv)``, x bf16 [M, K], w
float8_e4m3fn [N, K] with fp32 scales [ceil(N/128), ceil(K/128)] (Qwen ``*-FP8``), for the large
weights of a Qwen3.8-27B decode step (MODEL.md), M = 1..32 rows (decode and speculative verify),
and 64 / 512 rows on the first shape (more than 32 rows: the op's 32-row slices of the same kernels).
Random weights: one bf16 matrix per shape, quantized once on the GPU with
``formats_fp8.quantize_fp8_block``; the rotating copies are clones of it.
Providers:
  qwen38          the op, bf16 output
  qwen38 narrow stream  the op with QWEN38_FP8_STREAM=narrow (17..32 rows through the skinny kernel,
                  not the register-stream kernel's second m16 tile; the same bits)
  qwen38 chunked / qwen38 dequant / qwen38 mma  (more than 32 rows) the op with QWEN38_FP8_PREFILL forced
  cuBLAS bf16     ``F.linear(x, W_bf16)`` on the bf16 weight of the same shape (2x the weight bytes)
  dequant+matmul  ``F.linear(x, formats_fp8.dequantize_fp8_block(w, bf16))``, the dequantization
                  inside the timed call: what a user writes first
  scaled_mm fp8   ``torch._scaled_mm`` on fp8 activations quantized outside the timing (per row, or
                  one scale where this torch/GPU has no row-wise scaling) and the fp8 weight with one
                  scale per output row: a DIFFERENT contract (8-bit activations), listed for speed
                  only; skipped with a note in the meta when this torch/GPU cannot run it
bytes = the least a call must read plus write: the weight as its provider stores it (FP8: codes +
fp32 block scales; bf16: 2 N K; scaled_mm: codes + one fp32 scale per row), the activations (bf16;
fp8 + one fp32 scale per row for scaled_mm) and the bf16 output. dequant+matmul is charged the FP8
bytes although it moves far more. pct_of_ceiling: GB/s over the streaming-read ceiling of the run.
Writes fp8.json / fp8.meta.json / fp8.md / fp8.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from qwen38_kernels import bench  # noqa: F401  (the package import registers torch.ops.qwen38)
from qwen38_kernels import formats_fp8 as f8
from qwen38_kernels.shapes import WEIGHT_SHAPES

OP = "fp8_block_linear"
DEVICE = "cuda"
DTYPE = torch.bfloat16
ES = 2                     # bytes per bf16 element
ROWS = (1, 2, 4, 8, 16, 24, 32)
QUICK_ROWS = (1, 16, 32)
PREFILL_ROWS = (64, 512)   # more than 32 rows (the op's 32-row slices), on the first shape only
QUANT_CHUNK_ROWS = 4096    # rows quantized at a time (whole 128-row tiles: the result is that of one call)


@dataclass(frozen=True)
class Shape:
    """One weight W [N, K] of the decode step, ``label`` the tensor(s) it stands for."""
    N: int
    K: int
    label: str

    @property
    def name(self) -> str:
        return f"{self.N}x{self.K} {self.label}"


# MODEL.md, "Weights one decode step reads": the speed targets, largest first.
SHAPES = tuple(Shape(w.n, w.k, w.label) for w in WEIGHT_SHAPES  # the unfused ones of 6 MB and more
               if w.n * w.k >= 6144 * 5120 and w.label not in ("gdn qkv+z", "attn q+k+v"))


# ---- bytes ---------------------------------------------------------------------------------------
def fp8_weight_bytes(n: int, k: int) -> int:
    """e4m3 codes (one byte each) and the fp32 scale of every 128 x 128 tile."""
    gn, gk = f8.scale_grid(n, k)
    return n * k + 4 * gn * gk


def bf16_weight_bytes(n: int, k: int) -> int:
    return ES * n * k


def rowwise_fp8_weight_bytes(n: int, k: int) -> int:
    """e4m3 codes and one fp32 scale per output row (torch._scaled_mm's row-wise weight)."""
    return n * k + 4 * n


def activation_bytes(m: int, n: int, k: int) -> int:
    """x bf16 [M, K] read plus y bf16 [M, N] written."""
    return ES * m * k + ES * m * n


def fp8_activation_bytes(m: int, n: int, k: int) -> int:
    """x e4m3 [M, K] and one fp32 scale a row read, y bf16 [M, N] written."""
    return m * k + 4 * m + ES * m * n


# ---- providers -----------------------------------------------------------------------------------
def _qwen38(x, w, s):
    return torch.ops.qwen38.fp8_block_linear(x, w, s)


_qwen38_narrow = bench.with_knobs(_qwen38, QWEN38_FP8_STREAM="narrow")  # 17..32 rows: the skinny kernel
_qwen38_chunked = bench.with_knobs(_qwen38, QWEN38_FP8_PREFILL="chunked")  # more than 32 rows
_qwen38_dequant = bench.with_knobs(_qwen38, QWEN38_FP8_PREFILL="dequant")
_qwen38_mma = bench.with_knobs(_qwen38, QWEN38_FP8_PREFILL="mma")


def _cublas(x, w):
    return F.linear(x, w)


def _dequant_matmul(x, w, s):
    return F.linear(x, f8.dequantize_fp8_block(f8.FP8BlockWeight(w, s), DTYPE))


def _scaled_mm(x8, sx, w, sw):
    return torch._scaled_mm(x8, w.t(), scale_a=sx, scale_b=sw, out_dtype=DTYPE)


@dataclass
class Provider:
    """``fn(x, *weights)`` is the timed call (x as ``make_x`` builds it); ``weights`` the master
    tensors of a shape (built once, cloned for the rotating copies)."""
    name: str
    fn: Callable
    weight_bytes: Callable[[int, int], int]
    act_bytes: Callable[[int, int, int], int] = activation_bytes
    min_calls: int = 200
    min_rows: int = 0  # timed only from this many rows on


PROVIDERS = (
    Provider("qwen38", _qwen38, fp8_weight_bytes),
    Provider("qwen38 narrow stream", _qwen38_narrow, fp8_weight_bytes),
    Provider("qwen38 chunked", _qwen38_chunked, fp8_weight_bytes, min_calls=20, min_rows=33),
    Provider("qwen38 dequant", _qwen38_dequant, fp8_weight_bytes, min_calls=20, min_rows=33),
    Provider("qwen38 mma", _qwen38_mma, fp8_weight_bytes, min_calls=20, min_rows=33),
    Provider("cuBLAS bf16", _cublas, bf16_weight_bytes),
    # milliseconds a call: 20 calls a graph already hide the launches, and keep the sweep short
    Provider("dequant+matmul", _dequant_matmul, fp8_weight_bytes, min_calls=20),
    Provider("scaled_mm fp8", _scaled_mm, rowwise_fp8_weight_bytes, fp8_activation_bytes),
)


def record_bytes(provider: str, m: int, n: int, k: int) -> int:
    """Bytes one call of ``provider`` must read plus write (what GB/s is computed from)."""
    p = {p.name: p for p in PROVIDERS}[provider]
    return p.weight_bytes(n, k) + p.act_bytes(m, n, k)


def work(quick: bool = False) -> list[tuple[Shape, int]]:
    """Every (shape, rows) of the sweep, shapes in table order."""
    rows = QUICK_ROWS if quick else ROWS
    return [(s, m) for s in SHAPES for m in rows + (PREFILL_ROWS if s == SHAPES[0] else ())]


# ---- weights and activations ---------------------------------------------------------------------
def _quantize_on_gpu(w: torch.Tensor) -> f8.FP8BlockWeight:
    """``quantize_fp8_block`` in chunks of whole 128-row tiles (every step is local to a tile row)."""
    parts = [f8.quantize_fp8_block(w[r:r + QUANT_CHUNK_ROWS]) for r in range(0, w.shape[0], QUANT_CHUNK_ROWS)]
    return f8.FP8BlockWeight(torch.cat([p.weight for p in parts]),
                             torch.cat([p.weight_scale_inv for p in parts])).validate()


def _rowwise_fp8(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t [R, C] -> e4m3 codes [R, C] and fp32 scales [R, 1] (amax / 448 per row)."""
    amax = t.float().abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    s = amax / f8.E4M3_MAX
    return (t.float() / s).clamp(-f8.E4M3_MAX, f8.E4M3_MAX).to(torch.float8_e4m3fn), s


def _scaled_mm_setup(q: f8.FP8BlockWeight, k: int) -> tuple[tuple, Callable[[int], tuple], str]:
    """The fp8 weight with one scale per output row (re-quantized from the dequantized weight), a
    maker of the fp8 activations for M rows, and the scaling in use: row-wise where this torch/GPU
    runs it, else one scale per tensor. Raises when neither runs."""
    wd = f8.dequantize_fp8_block(q, torch.float32)
    w8, sw = _rowwise_fp8(wd)
    del wd

    def rowwise(m):
        x8, sx = _rowwise_fp8(torch.randn(m, k, dtype=DTYPE, device=DEVICE))
        return x8, sx

    try:
        x8, sx = rowwise(1)
        _scaled_mm(x8, sx, w8, sw.reshape(1, -1))
        torch.cuda.synchronize()
        return (w8, sw.reshape(1, -1).contiguous()), rowwise, "row-wise scales (x per row, w per output row)"
    except Exception as e_row:  # no row-wise scaling here: one scale per tensor
        one_w = sw.max().reshape(())

        def tensorwise(m):
            x = torch.randn(m, k, dtype=DTYPE, device=DEVICE)
            s = (x.float().abs().amax() / f8.E4M3_MAX).reshape(())
            return (x.float() / s).to(torch.float8_e4m3fn), s

        w8t = (w8.float() * sw / one_w).clamp(-f8.E4M3_MAX, f8.E4M3_MAX).to(torch.float8_e4m3fn)
        x8, sx = tensorwise(1)
        _scaled_mm(x8, sx, w8t, one_w)
        torch.cuda.synchronize()
        return (w8t, one_w), tensorwise, (f"tensor-wise scales (row-wise failed: "
                                          f"{type(e_row).__name__}: {str(e_row).splitlines()[0][:200]})")


def build_weights(shape: Shape) -> tuple[dict[str, tuple], dict[str, str], Callable[[int], tuple] | None]:
    """Master weight tensors per provider on the GPU, notes (how the scaled_mm peer runs, or why it is
    skipped: key "skip:scaled_mm fp8"), and the maker of scaled_mm's fp8 activations."""
    n, k = shape.N, shape.K
    w = torch.randn(n, k, dtype=DTYPE, device=DEVICE) * (k ** -0.5)
    q = _quantize_on_gpu(w)
    weights = {"qwen38": (q.weight, q.weight_scale_inv), "qwen38 narrow stream": (q.weight, q.weight_scale_inv),
               "cuBLAS bf16": (w,),
               "qwen38 chunked": (q.weight, q.weight_scale_inv), "qwen38 dequant": (q.weight, q.weight_scale_inv),
               "qwen38 mma": (q.weight, q.weight_scale_inv),
               "dequant+matmul": (q.weight, q.weight_scale_inv)}
    notes: dict[str, str] = {}
    make_x8 = None
    try:
        weights["scaled_mm fp8"], make_x8, how = _scaled_mm_setup(q, k)
        notes["scaled_mm fp8"] = how
    except Exception as e:  # not supported by this torch / device: no peer, a note
        notes["skip:scaled_mm fp8"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return weights, notes, make_x8


def _copy(master: tuple, i: int) -> tuple:
    """Copy ``i`` of a provider's weights: copy 0 is the master itself, the others GPU clones."""
    return master if i == 0 else tuple(t.clone() for t in master)


# ---- the sweep -----------------------------------------------------------------------------------
def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    """Time every (shape, rows, provider); returns the records and the meta (ceiling, failures,
    skipped providers, how the scaled_mm peer runs). ``ceiling``: a read ceiling already measured in
    this process (else it is measured first)."""
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    meta["ceiling_method"] = getattr(ceiling, "method", "given by the caller")
    print(f"read ceiling {ceiling:.0f} GB/s", file=sys.stderr)
    meta["rows"] = list(QUICK_ROWS if quick else ROWS)
    meta["prefill_rows"] = f"{list(PREFILL_ROWS)} on {SHAPES[0].name} only"
    meta["shapes"] = [s.name for s in SHAPES]
    meta["scaled_mm"] = ("torch._scaled_mm, fp8 activations quantized outside the timing; a different "
                         "contract (8-bit activations): speed only")
    records, failures, skipped, scaled = [], [], [], []
    torch.manual_seed(0)
    current: Shape | None = None
    weights: dict[str, tuple] = {}
    make_x8 = None
    for shape, m in bench.progress(work(quick), "bench_fp8"):
        if shape != current:
            weights = {}
            torch.cuda.empty_cache()
            weights, notes, make_x8 = build_weights(shape)
            current = shape
            if "scaled_mm fp8" in notes:
                scaled.append(f"{shape.name}: {notes['scaled_mm fp8']}")
            skipped += [f"{shape.name} {key[5:]}: {why}" for key, why in notes.items() if key.startswith("skip:")]
        n, k = shape.N, shape.K
        for prov in PROVIDERS:
            master = weights.get(prov.name)
            if master is None or m < prov.min_rows:
                continue  # skipped for this shape (noted once above), or not a row count it serves
            if prov.name == "scaled_mm fp8":
                make_x = lambda i: make_x8(m)  # noqa: E731
            else:
                make_x = lambda i: (torch.randn(m, k, dtype=DTYPE, device=DEVICE),)  # noqa: E731
            base: list[tuple] = []
            try:
                base = bench.rotating_copies(lambda i: (*make_x(i), *_copy(master, i)),
                                             prov.weight_bytes(n, k) + prov.act_bytes(m, n, k))
                copies = len(base)
                us = bench.time_calls(prov.fn, base, min_calls=prov.min_calls)
            except Exception as e:  # one broken provider must not lose the rest of the sweep
                why = (str(e).splitlines() or [""])[0][:500]
                failures.append(f"{OP} {shape.name} M={m} {prov.name}: {type(e).__name__}: {why}")
                print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                continue
            finally:
                base = []  # free the copies before the next provider builds its own
            records.append(bench.Record.from_timing(OP, prov.name, shape.name, n, k, m, us,
                                                    record_bytes(prov.name, m, n, k), ceiling,
                                                    note=f"{copies} rotating copies"))
    del weights
    torch.cuda.empty_cache()
    if scaled:
        meta["scaled_mm_scaling"] = scaled
    if skipped:
        meta["skipped"] = skipped
    if failures:
        meta["failures"] = failures
    return records, meta


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("fp8", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"rows {QUICK_ROWS} only",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
