"""Benchmark the output head against its peers on the GPU, in one run.

    python benchmarks/bench_head.py [--quick] [--out benchmarks/results/<gpu>/]

Ops: ``torch.ops.qwen38.head_logits(x, w)`` (fp32 logits [M, V]) and ``head_argmax(x, w)`` (the
fused greedy epilogue: 12 bytes a row written instead of 4 V); x bf16 [M, 5120], w bf16 [V, 5120],
V = 248320 (Qwen3.8-27B's untied lm_head; the full run adds a 32768-row sliced draft vocabulary),
M = 1..32 rows (decode and speculative verify).
Providers:
  qwen38             head_logits (the default kernel: QWEN38_HEAD_KERNEL=tiles since session 12)
  qwen38 argmax      head_argmax
  cuBLAS bf16+cast   ``F.linear(x, w).float()``: bf16 logits (rounded) cast to fp32, the usual head
  cuBLAS fp32 out    ``torch.mm(x, w.t(), out_dtype=torch.float32)`` where this torch has it (the same
                     contract as ours: fp32 logits, no bf16 rounding); skipped with a note otherwise
  qwen38 ring / qwen38 argmax ring
                     the same ops on the ring kernel (QWEN38_HEAD_KERNEL=ring: other bits, each row
                     still its 1-row call's)
  qwen38 128 cols    head_logits on 128-column tiles (QWEN38_HEAD_COLS=128, the default before session 36;
                     the default is 64 columns at 8 stages on the H200); same bits as qwen38
  qwen38 nvfp4 head  the head's weight quantized to NVFP4 (formats.quantize_nvfp4: other logits, the
                     user's choice) through ``nvfp4_linear(..., out_dtype=torch.float32)``: 0.5625 bytes a
                     weight instead of 2 (what an NVFP4 lm_head costs; nn.swap_linears can make one)
bytes = the weight (2 V K; NVFP4: V K / 2 + V K / 16), the activations (2 M K) and the output the provider
writes (fp32 4 M V; bf16+cast: the bf16 logits written and read once more plus the fp32 written; argmax:
12 M).
One weight copy already exceeds L2 many times over, so every call reads it cold.
Writes head.json / head.meta.json / head.md / head.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from qwen38_kernels import bench  # the package import registers torch.ops.qwen38
from qwen38_kernels.formats import quantize_nvfp4

OP = "head"
DEVICE = "cuda"
DTYPE = torch.bfloat16
K = 5120
VOCABS = ((248320, "lm_head"), (32768, "draft vocab"))
QUICK_VOCABS = VOCABS[:1]
ROWS = (1, 2, 4, 8, 16, 24, 32)
QUICK_ROWS = (1, 16, 32)
MIN_CALLS = 20  # a call streams 2.5 GB (~0.6 ms): 20 calls a graph already hide the launches


def _qwen38(x, w):
    return torch.ops.qwen38.head_logits(x, w)


def _qwen38_argmax(x, w):
    return torch.ops.qwen38.head_argmax(x, w)


def _cublas_cast(x, w):
    return F.linear(x, w).float()


def _cublas_fp32(x, w):
    return torch.mm(x, w.t(), out_dtype=torch.float32)


@dataclass
class Provider:
    name: str
    fn: Callable
    out_bytes: Callable[[int, int], int]  # (M, V) -> bytes written (and re-read) beyond x and w
    min_rows: int = 1                     # timed from this many rows on


PROVIDERS = (
    Provider("qwen38", _qwen38, lambda m, v: 4 * m * v),
    Provider("qwen38 argmax", _qwen38_argmax, lambda m, v: 12 * m),
    Provider("cuBLAS bf16+cast", _cublas_cast, lambda m, v: (2 + 2 + 4) * m * v),
    Provider("cuBLAS fp32 out", _cublas_fp32, lambda m, v: 4 * m * v),
    # the ring kernel (QWEN38_HEAD_KERNEL=ring; the default before session 12) and its 17..32-row knob
    Provider("qwen38 ring", bench.with_knobs(_qwen38, QWEN38_HEAD_KERNEL="ring"), lambda m, v: 4 * m * v),
    Provider("qwen38 argmax ring", bench.with_knobs(_qwen38_argmax, QWEN38_HEAD_KERNEL="ring"), lambda m, v: 12 * m),
    # the tiles kernel on 128-column tiles (the default until session 36)
    Provider("qwen38 128 cols", bench.with_knobs(_qwen38, QWEN38_HEAD_COLS="128"), lambda m, v: 4 * m * v),
)


def record_bytes(prov: Provider, m: int, v: int) -> int:
    return 2 * v * K + 2 * m * K + prov.out_bytes(m, v)


NVFP4_HEAD = "qwen38 nvfp4 head"


def _nvfp4_head(x, packed, scale, g):
    return torch.ops.qwen38.nvfp4_linear(x, packed, scale, g, None, torch.float32)


def _nvfp4_weight_bytes(v: int) -> int:
    return v * K // 2 + v * K // 16  # packed e2m1 + e4m3 scales


def _nvfp4_head_bytes(m: int, v: int) -> int:
    return _nvfp4_weight_bytes(v) + 2 * m * K + 4 * m * v


def _time_nvfp4_head(q, v: int, m: int) -> tuple[float, int]:
    """us of the NVFP4 head (q: the quantized weight) at m rows over cold copies, and the copy count."""
    base = bench.rotating_copies(
        lambda i: (torch.randn(m, K, dtype=DTYPE, device=DEVICE),
                   *((q.packed, q.scale) if i == 0 else (q.packed.clone(), q.scale.clone())), q.global_scale),
        _nvfp4_weight_bytes(v) + 2 * m * K)
    try:
        return bench.time_calls(_nvfp4_head, base, min_calls=MIN_CALLS), len(base)
    finally:
        base = []


def _bf16_copies(w, m: int, v: int) -> list[tuple]:
    """(x, w) argument copies of the bf16 head at m rows, enough to read w cold (the first copy is w)."""
    return bench.rotating_copies(
        lambda i: (torch.randn(m, K, dtype=DTYPE, device=DEVICE), w if i == 0 else w.clone()), 2 * v * K + 2 * m * K)


def _warm_up(w, m: int, v: int) -> None:
    """One untimed timing of the first provider on a new weight. Session 36's full run timed the first
    record of each vocabulary 13% slow (qwen38 at 1 row: 655.8 us, then 580.8 three times on the same
    build minutes later; every later provider and row in line): the first timing after a new weight
    is made is not representative, so it is made and dropped here."""
    base = _bf16_copies(w, m, v)
    try:
        bench.time_calls(PROVIDERS[0].fn, base, min_calls=MIN_CALLS)
    finally:
        base = []


def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    meta["ceiling_method"] = getattr(ceiling, "method", "given by the caller")
    print(f"read ceiling {ceiling:.0f} GB/s", file=sys.stderr)
    rows = QUICK_ROWS if quick else ROWS
    vocabs = QUICK_VOCABS if quick else VOCABS
    meta["rows"] = list(rows)
    meta["warm_up"] = "one untimed timing of the first provider after each new weight (_warm_up)"
    meta["shapes"] = [f"{v}x{K} {label}" for v, label in vocabs]
    records, failures, skipped = [], [], []
    torch.manual_seed(0)
    for v, label in vocabs:
        shape = f"{v}x{K} {label}"
        w = torch.randn(v, K, dtype=DTYPE, device=DEVICE) * (K ** -0.5)
        q = quantize_nvfp4(w)  # the NVFP4 head's weight (its own provider below)
        _warm_up(w, rows[0], v)
        for m in bench.progress(rows, f"bench_head {label}"):
            for prov in PROVIDERS:
                if m < prov.min_rows:
                    continue
                try:
                    base = _bf16_copies(w, m, v)
                    copies = len(base)
                    us = bench.time_calls(prov.fn, base, min_calls=MIN_CALLS)
                except Exception as e:  # one broken provider must not lose the rest of the sweep
                    why = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
                    if prov.name == "cuBLAS fp32 out":
                        skipped.append(f"{shape} M={m} {prov.name}: {why}")
                    else:
                        failures.append(f"{OP} {shape} M={m} {prov.name}: {why}")
                        print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                    continue
                finally:
                    base = []
                records.append(bench.Record.from_timing(OP, prov.name, shape, v, K, m, us,
                                                        record_bytes(prov, m, v), ceiling,
                                                        note=f"{copies} weight copies"))
            try:
                us, copies = _time_nvfp4_head(q, v, m)
            except Exception as e:
                failures.append(f"{OP} {shape} M={m} {NVFP4_HEAD}: {type(e).__name__}: {str(e)[:300]}")
                print(f"\nFAILED {failures[-1]}", file=sys.stderr)
            else:
                records.append(bench.Record.from_timing(OP, NVFP4_HEAD, shape, v, K, m, us, _nvfp4_head_bytes(m, v),
                                                        ceiling, note=f"{copies} weight copies"))
            torch.cuda.empty_cache()
        del w, q
        torch.cuda.empty_cache()
    if skipped:
        meta["skipped"] = skipped
    if failures:
        meta["failures"] = failures
    return records, meta


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("head", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"rows {QUICK_ROWS}, the full vocabulary only",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
