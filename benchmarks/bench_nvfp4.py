"""Benchmark the NVFP4 weight GEMM against its peers on the GPU, in one run.

    python benchmarks/bench_nvfp4.py [--quick] [--out benchmarks/results/<gpu>/]

Op and shapes: ``torch.ops.qwen38.nvfp4_linear(x, w_packed, w_scale, w_global)``, x bf16 [M, K],
W [N, K] for every weight of a Qwen3.8-27B decode step (MODEL.md's weight table, fused and unfused),
M = 1..32 rows (decode and speculative verify). Random weights: one bf16 matrix per shape, quantized
once on the GPU with ``formats.quantize_nvfp4``; the rotating copies are clones of it.

Prefill part (op "nvfp4_linear prefill", TFLOP/s = 2 M N K / time): the 45 MB+ weights at M = 64..4096
rows, with the same op in its three settings (QWEN38_NVFP4_PREFILL, read when the timed graph is
captured): "qwen38" (auto: the shipped threshold), "qwen38 chunked", "qwen38 dequant", "qwen38 mma" (on
Hopper its warpgroup-MMA form) and "qwen38 mma.sync" (QWEN38_NVFP4_WGMMA=0) forced (they show where the
threshold belongs), against "cuBLAS bf16" = ``F.linear`` on the same weights
pre-dequantized to bf16 (outside the timing) and "dequant+matmul" as below.

Decode providers:
  qwen38          the op, bf16 output
  cuBLAS bf16     ``F.linear(x, W_bf16)`` on the bf16 weight of the same shape (the bar to beat)
  tinygemm int4   ``torch._weight_int4pack_mm``, group 128 (asymmetric int4, bf16 scales and zeros),
                  on random codes; skipped with a note in the meta when this torch cannot run it
  dequant+matmul  ``F.linear(x, formats.dequantize_nvfp4(w, bf16))`` with the dequantization inside
                  the timed call: what a user writes first
bytes = the least a call must read plus write: the weight as its provider stores it (NVFP4: codes +
e4m3 block scales + the fp32 global scale; bf16: 2 N K; int4: codes + bf16 scales and zeros), the
activations and the bf16 output. dequant+matmul is charged the NVFP4 bytes although it moves far more.
Writes nvfp4.json / nvfp4.meta.json / nvfp4.md / nvfp4.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from qwen38_kernels import bench, formats  # the package import registers torch.ops.qwen38
from qwen38_kernels.shapes import WEIGHT_SHAPES

OP = "nvfp4_linear"
DEVICE = "cuda"
DTYPE = torch.bfloat16
ES = 2                     # bytes per bf16 element
ROWS = (1, 2, 4, 8, 16, 24, 32)
QUICK_ROWS = (1, 16, 32)
PREFILL_OP = f"{OP} prefill"
PREFILL_ROWS = (64, 128, 256, 512, 1024, 2048, 4096)
QUICK_PREFILL_ROWS = (64, 128, 512, 1024)
INT4_GROUP = 128           # tinygemm group size along K
INT4_INNER_K_TILES = 8     # tinygemm packing parameter (K must be a multiple of 16 x this)
QUANT_CHUNK_ROWS = 4096    # rows quantized at a time on the GPU (bounds the quantizer's temporaries)


@dataclass(frozen=True)
class Shape:
    """One weight W [N, K] of the decode step, ``label`` the tensor(s) it stands for."""
    N: int
    K: int
    label: str

    @property
    def name(self) -> str:
        return f"{self.N}x{self.K} {self.label}"


# MODEL.md, "Weights one decode step reads", fused and unfused, largest first.
SHAPES = tuple(Shape(w.n, w.k, w.label) for w in WEIGHT_SHAPES)


# Prefill: the weights of 45 MB and more in NVFP4 (quick: the first only).
PREFILL_SHAPES = (SHAPES[0], SHAPES[1], SHAPES[2])

# ---- bytes ---------------------------------------------------------------------------------------
def nvfp4_weight_bytes(n: int, k: int) -> int:
    """E2M1 codes (half a byte each), e4m3 block scales (one per 16 k) and the fp32 global scale."""
    return n * k // 2 + n * (k // formats.NVFP4_BLOCK) + 4


def bf16_weight_bytes(n: int, k: int) -> int:
    return ES * n * k


def int4_weight_bytes(n: int, k: int, group: int = INT4_GROUP) -> int:
    """tinygemm: int4 codes (half a byte each) and a bf16 (scale, zero) pair per group of k per row."""
    return n * k // 2 + (k // group) * n * 2 * ES


def activation_bytes(m: int, n: int, k: int) -> int:
    """x bf16 [M, K] read plus y bf16 [M, N] written."""
    return ES * m * k + ES * m * n


# ---- providers -----------------------------------------------------------------------------------
def _qwen38(x, p, s, g):
    return torch.ops.qwen38.nvfp4_linear(x, p, s, g)


def _cublas(x, w):
    return F.linear(x, w)


def _tinygemm(x, w_int4, scales_and_zeros):
    return torch._weight_int4pack_mm(x, w_int4, INT4_GROUP, scales_and_zeros)


def _dequant_matmul(x, p, s, g):
    return F.linear(x, formats.dequantize_nvfp4(formats.NVFP4Weight(p, s, g), DTYPE))


@dataclass
class Provider:
    """``fn(x, *weights)`` is the timed call; ``weights`` the master tensors of a shape (built once,
    cloned for the rotating copies); ``weight_bytes(N, K)`` what the call reads of the weight."""
    name: str
    fn: Callable
    weight_bytes: Callable[[int, int], int]
    min_calls: int = 200


PROVIDERS = (
    Provider("qwen38", _qwen38, nvfp4_weight_bytes),
    Provider("cuBLAS bf16", _cublas, bf16_weight_bytes),
    Provider("tinygemm int4", _tinygemm, int4_weight_bytes),
    # milliseconds a call: 20 calls a graph already hide the launches, and keep the sweep short
    Provider("dequant+matmul", _dequant_matmul, nvfp4_weight_bytes, min_calls=20),
)


@dataclass
class PrefillProvider:
    """A prefill provider: ``weights`` names the master tensors it takes ("nvfp4" or "bf16 dequantized"),
    ``knobs`` the QWEN38_* settings in force while its graph is captured."""
    name: str
    fn: Callable
    weights: str
    weight_bytes: Callable[[int, int], int]
    knobs: tuple[tuple[str, str], ...] = ()


# 0.1..10 ms a call: 20 calls a graph hide the launches
PREFILL_MIN_CALLS = 20
PREFILL_PROVIDERS = (
    PrefillProvider("qwen38", _qwen38, "nvfp4", nvfp4_weight_bytes, (("QWEN38_NVFP4_PREFILL", "auto"),)),
    PrefillProvider("qwen38 chunked", _qwen38, "nvfp4", nvfp4_weight_bytes, (("QWEN38_NVFP4_PREFILL", "chunked"),)),
    PrefillProvider("qwen38 dequant", _qwen38, "nvfp4", nvfp4_weight_bytes, (("QWEN38_NVFP4_PREFILL", "dequant"),)),
    PrefillProvider("qwen38 mma", _qwen38, "nvfp4", nvfp4_weight_bytes, (("QWEN38_NVFP4_PREFILL", "mma"),)),
    PrefillProvider("qwen38 mma.sync", _qwen38, "nvfp4", nvfp4_weight_bytes,
                    (("QWEN38_NVFP4_PREFILL", "mma"), ("QWEN38_NVFP4_WGMMA", "0"))),
    PrefillProvider("cuBLAS bf16", _cublas, "bf16 dequantized", bf16_weight_bytes),
    PrefillProvider("dequant+matmul", _dequant_matmul, "nvfp4", nvfp4_weight_bytes),
)


def record_bytes(provider: str, m: int, n: int, k: int) -> int:
    """Bytes one call of ``provider`` must read plus write (what GB/s is computed from)."""
    by_name = {p.name: p for p in PROVIDERS}
    return by_name[provider].weight_bytes(n, k) + activation_bytes(m, n, k)


def touched_bytes(provider: str, m: int, n: int, k: int) -> int:
    """Bytes of one rotating copy a call reads (weight + activations): they decide the copy count."""
    by_name = {p.name: p for p in PROVIDERS}
    return by_name[provider].weight_bytes(n, k) + ES * m * k


def work(quick: bool = False) -> list[tuple[Shape, int]]:
    """Every (shape, rows) of the sweep, shapes in table order."""
    rows = QUICK_ROWS if quick else ROWS
    return [(s, m) for s in SHAPES for m in rows]


def prefill_work(quick: bool = False) -> list[tuple[Shape, int]]:
    """Every (shape, rows) of the prefill sweep."""
    if quick:
        return [(PREFILL_SHAPES[0], m) for m in QUICK_PREFILL_ROWS]
    return [(s, m) for s in PREFILL_SHAPES for m in PREFILL_ROWS]


# ---- weights -------------------------------------------------------------------------------------
def _quantize_on_gpu(w: torch.Tensor) -> tuple[formats.NVFP4Weight, str]:
    """``formats.quantize_nvfp4`` on the GPU, in row chunks with the global scale of the whole matrix
    (every other step is local to a row, so the result is that of one call). Falls back to the CPU."""
    try:
        g = formats.nvfp4_global_scale(w)
        parts = [formats.quantize_nvfp4(w[r:r + QUANT_CHUNK_ROWS], g)
                 for r in range(0, w.shape[0], QUANT_CHUNK_ROWS)]
        q = formats.NVFP4Weight(torch.cat([p.packed for p in parts]), torch.cat([p.scale for p in parts]),
                                g.contiguous()).validate()
        return q, f"quantized on {w.device} in chunks of {QUANT_CHUNK_ROWS} rows"
    except Exception as e:  # a torch without some op on CUDA: the (slow) CPU quantizer
        c = formats.quantize_nvfp4(w.cpu())
        q = formats.NVFP4Weight(c.packed.to(w.device), c.scale.to(w.device), c.global_scale.to(w.device))
        return q, f"quantized on the CPU (GPU quantizer failed: {type(e).__name__}: {e})"


def _int4_weights(n: int, k: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """tinygemm's packed weight from random codes (uint8 [N, K/2], two 4-bit codes a byte) and
    bf16 scales and zeros [K/128, N, 2]."""
    codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)
    w_int4 = torch._convert_weight_to_int4pack(codes, INT4_INNER_K_TILES)
    sz = torch.empty(k // INT4_GROUP, n, 2, dtype=DTYPE, device=device)
    sz[..., 0].uniform_(0.5 / 8, 1.5 / 8)   # scales
    sz[..., 1].uniform_(-1.0, 1.0)          # zeros
    return w_int4, sz


def build_weights(shape: Shape) -> tuple[dict[str, tuple], dict[str, str]]:
    """Master weight tensors per provider on the GPU, and notes (how the NVFP4 weight was made,
    why a provider is skipped for this shape: the key "skip:<provider>")."""
    n, k = shape.N, shape.K
    w = torch.randn(n, k, dtype=DTYPE, device=DEVICE) * (k ** -0.5)
    q, how = _quantize_on_gpu(w)
    nv = (q.packed, q.scale, q.global_scale)
    weights = {"qwen38": nv, "cuBLAS bf16": (w,), "dequant+matmul": nv}
    notes = {"nvfp4": how}
    try:
        w_int4, sz = _int4_weights(n, k, w.device)
        _tinygemm(torch.randn(1, k, dtype=DTYPE, device=DEVICE), w_int4, sz)
        if w.is_cuda:
            torch.cuda.synchronize(w.device)  # an asynchronous launch error surfaces here
        weights["tinygemm int4"] = (w_int4, sz)
    except Exception as e:  # not supported by this torch / device: no peer, a note
        notes["skip:tinygemm int4"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return weights, notes


def _copy(master: tuple, i: int) -> tuple:
    """Copy ``i`` of a provider's weights: copy 0 is the master itself, the others GPU clones."""
    return master if i == 0 else tuple(t.clone() for t in master)


# ---- the sweep -----------------------------------------------------------------------------------
def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    """Time every (shape, rows, provider); returns the records and the meta (ceilings, failures,
    skipped providers). ``ceiling``: a read ceiling already measured in this process (else it is
    measured first)."""
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    meta["ceiling_method"] = getattr(ceiling, "method", "given by the caller")
    copy = bench.measure_copy_ceiling()
    meta.update(copy_GBps=round(float(copy), 1), copy_method=copy.method)
    print(f"read ceiling {ceiling:.0f} GB/s, copy {copy:.0f} GB/s", file=sys.stderr)

    meta["rows"] = list(QUICK_ROWS if quick else ROWS)
    meta["shapes"] = [s.name for s in SHAPES]
    meta["int4"] = (f"torch._weight_int4pack_mm, group {INT4_GROUP}, innerKTiles {INT4_INNER_K_TILES}, "
                    "random codes and bf16 scales/zeros")
    records, failures, skipped, quant = [], [], [], []
    torch.manual_seed(0)
    current: Shape | None = None
    weights: dict[str, tuple] = {}
    for shape, m in bench.progress(work(quick), "bench_nvfp4"):
        if shape != current:
            weights = {}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            weights, notes = build_weights(shape)
            current = shape
            quant.append(f"{shape.name}: {notes['nvfp4']}")
            skipped += [f"{shape.name} {key[5:]}: {why}" for key, why in notes.items()
                        if key.startswith("skip:")]
        n, k = shape.N, shape.K
        for prov in PROVIDERS:
            master = weights.get(prov.name)
            if master is None:
                continue  # skipped for this shape (noted once above)
            base: list[tuple] = []
            try:
                base = bench.rotating_copies(
                    lambda i: (torch.randn(m, k, dtype=DTYPE, device=DEVICE), *_copy(master, i)),
                    touched_bytes(prov.name, m, n, k))
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
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    records += _run_prefill(quick, ceiling, meta, failures)
    meta["nvfp4_weights"] = quant
    if skipped:
        meta["skipped"] = skipped
    if failures:
        meta["failures"] = failures
    return records, meta


def _run_prefill(quick: bool, ceiling: float, meta: dict, failures: list[str]) -> list[bench.Record]:
    """The prefill sweep: every (shape, rows) of ``prefill_work`` and every PREFILL_PROVIDERS entry."""
    from qwen38_kernels import knobs

    meta["prefill_rows"] = list(QUICK_PREFILL_ROWS if quick else PREFILL_ROWS)
    meta["prefill_shapes"] = [s.name for s in (PREFILL_SHAPES[:1] if quick else PREFILL_SHAPES)]
    meta["prefill_method"] = (f"graphs of >= {PREFILL_MIN_CALLS} calls; TFLOP/s = 2 M N K / time; qwen38 = the "
                              "shipped auto threshold, 'qwen38 chunked' / 'qwen38 dequant' / 'qwen38 mma' forced with "
                              "QWEN38_NVFP4_PREFILL ('qwen38 mma.sync': mma with QWEN38_NVFP4_WGMMA=0); cuBLAS bf16 on the NVFP4 weights dequantized to bf16 once")
    records: list[bench.Record] = []
    current: Shape | None = None
    masters: dict[str, tuple] = {}
    for shape, m in bench.progress(prefill_work(quick), "bench_nvfp4 prefill"):
        n, k = shape.N, shape.K
        if shape != current:
            masters = {}
            torch.cuda.empty_cache()
            w = torch.randn(n, k, dtype=DTYPE, device=DEVICE) * (k ** -0.5)
            q, _ = _quantize_on_gpu(w)
            del w
            masters = {"nvfp4": (q.packed, q.scale, q.global_scale),
                       "bf16 dequantized": (formats.dequantize_nvfp4(q, DTYPE),)}
            current = shape
        for prov in PREFILL_PROVIDERS:
            master = masters[prov.weights]
            base: list[tuple] = []
            try:
                base = bench.rotating_copies(
                    lambda i: (torch.randn(m, k, dtype=DTYPE, device=DEVICE), *_copy(master, i)),
                    prov.weight_bytes(n, k) + ES * m * k)
                copies = len(base)
                with knobs.override(**dict(prov.knobs)):
                    us = bench.time_calls(prov.fn, base, min_calls=PREFILL_MIN_CALLS)
            except Exception as e:  # one broken provider must not lose the rest of the sweep
                why = (str(e).splitlines() or [""])[0][:500]
                failures.append(f"{PREFILL_OP} {shape.name} M={m} {prov.name}: {type(e).__name__}: {why}")
                print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                continue
            finally:
                base = []
            records.append(bench.Record.from_timing(
                PREFILL_OP, prov.name, shape.name, n, k, m, us, prov.weight_bytes(n, k) + activation_bytes(m, n, k),
                ceiling, note=f"{copies} rotating copies", flops=2 * m * n * k))
    masters = {}
    torch.cuda.empty_cache()
    return records


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("nvfp4", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"rows {QUICK_ROWS} only; prefill rows {QUICK_PREFILL_ROWS} on "
                            f"{PREFILL_SHAPES[0].name} only",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
