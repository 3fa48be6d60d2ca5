"""Prefill strategies side by side (a lab: the tile-table sweep and bench_nvfp4 / bench_fp8 keep the
record): us per call, graph-timed with cold weights (qwen38_kernels.sweep's timing), for every
strategy of nvfp4_linear and fp8_block_linear past 32 rows, and cuBLAS bf16 on the same shape.

    python benchmarks/lab/prefill_ab.py [--quick] [--ops OP[,OP]] [--chunked-max ROWS] [--out FILE.md]

nvfp4_linear's "mma" strategy runs as "mma.sync" (QWEN38_NVFP4_WGMMA=0) and, on Hopper, "wgmma" (its
warpgroup-MMA form; the same bits); "auto" is the shipped rule.
"""
from __future__ import annotations

import argparse
import sys

import torch

from qwen38_kernels import bench, knobs, sweep

SHAPES = ((34816, 5120), (17408, 5120), (5120, 17408), (10240, 5120), (6144, 5120), (1024, 5120))
ROWS = (33, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048)
QUICK_SHAPES = SHAPES[:1] + SHAPES[2:5]
QUICK_ROWS = (33, 64, 128, 256, 512, 1024)
# label -> knobs; mma at both tile heights (QWEN38_PREFILL_TILE_ROWS)
STRATEGIES = {
    "nvfp4_linear": {"chunked": {"QWEN38_NVFP4_PREFILL": "chunked"}, "dequant": {"QWEN38_NVFP4_PREFILL": "dequant"},
                     "mma.sync": {"QWEN38_NVFP4_PREFILL": "mma", "QWEN38_NVFP4_WGMMA": "0"},
                     "wgmma": {"QWEN38_NVFP4_PREFILL": "mma", "QWEN38_NVFP4_WGMMA": "1"},
                     "auto": {"QWEN38_NVFP4_PREFILL": "auto"}},
    "fp8_block_linear": {"chunked": {"QWEN38_FP8_PREFILL": "chunked"},
                         "mma 64": {"QWEN38_FP8_PREFILL": "mma", "QWEN38_PREFILL_TILE_ROWS": "64"},
                         "mma 128": {"QWEN38_FP8_PREFILL": "mma", "QWEN38_PREFILL_TILE_ROWS": "128"}},
}


def _cublas_us(n: int, k: int, m: int, x: torch.Tensor) -> float:
    copies = bench.rotating_copies(lambda i: (torch.randn(n, k, device="cuda", dtype=torch.bfloat16),), 2 * n * k)
    return bench.time_calls(lambda w: torch.nn.functional.linear(x[:m], w), copies, repeats=5, min_calls=20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ops", default=",".join(STRATEGIES), help="comma-separated ops to time")
    ap.add_argument("--chunked-max", type=int, default=256, help="time 32-row slices up to this many rows")
    a = ap.parse_args(argv)
    shapes, rows = (QUICK_SHAPES, QUICK_ROWS) if a.quick else (SHAPES, ROWS)
    lines = [f"# prefill strategies, us per call ({bench.gpu_name()}, graph-timed, cold weights)", ""]
    for n, k in shapes:
        x = torch.randn(max(rows), k, device="cuda", dtype=torch.bfloat16)
        for op, strategies in STRATEGIES.items():
            if op not in a.ops.split(","):
                continue
            names = list(strategies)
            fn = sweep._call(op)
            weights = sweep.make_weights(op, n, k)
            lines += [f"## {op} {n}x{k}", "", "| rows | " + " | ".join(names) + " | cuBLAS bf16 |",
                      "|---" * (len(names) + 2) + "|"]
            for m in rows:
                us = []
                for s in names:
                    if s == "chunked" and m > a.chunked_max:
                        us.append(float("inf"))
                        continue
                    with knobs.override(**strategies[s]):
                        us.append(sweep._time(fn, op, n, k, m, weights, x))
                cb = _cublas_us(n, k, m, x)
                best = min(range(len(us)), key=lambda i: us[i])
                cells = ["-" if u == float("inf") else f"**{u:.1f}**" if i == best else f"{u:.1f}"
                         for i, u in enumerate(us)]
                lines.append(f"| {m} | " + " | ".join(cells) + f" | {cb:.1f} |")
                print(op, n, k, m, dict(zip(names, [round(u, 1) for u in us])), "cuBLAS", round(cb, 1), flush=True)
            lines.append("")
            del weights
            torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
