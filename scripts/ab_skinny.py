"""A/B timing of the skinny weight GEMMs (nvfp4_linear, fp8_block_linear) for kernel work: the
bench harness's graph timing over rotating cold copies, a few shapes and row counts, one line each.
Prints `tag op NxK M us GB/s`; run it once per build and compare (benchmarks/ keep the full tables).

    python scripts/ab_skinny.py TAG [--rows 1,8,16,32] [--shapes 34816x5120,5120x17408,6144x5120]
"""
from __future__ import annotations

import argparse

import torch

from profile_kernels import random_fp8, random_nvfp4  # scripts/ (the script's own folder)
from qwen38_kernels import bench

OPS = torch.ops.qwen38


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tag")
    ap.add_argument("--rows", default="1,8,16,32")
    ap.add_argument("--shapes", default="34816x5120,5120x17408,6144x5120")
    ap.add_argument("--ops", default="nvfp4,fp8")
    a = ap.parse_args()
    rows = [int(r) for r in a.rows.split(",")]
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        for op in a.ops.split(","):
            if op == "nvfp4":
                w, s, gs = random_nvfp4(n, k)
                wbytes = n * k // 2 + n * k // 16
                make = lambda i, w=w, s=s, gs=gs: (w.clone(), s.clone(), gs)  # noqa: E731
                call = lambda x, w, s, gs: OPS.nvfp4_linear(x, w, s, gs, None, None)  # noqa: E731
            else:
                w, s = random_fp8(n, k)
                wbytes = n * k
                make = lambda i, w=w, s=s: (w.clone(), s.clone())  # noqa: E731
                call = lambda x, w, s: OPS.fp8_block_linear(x, w, s, None, None)  # noqa: E731
            copies = bench.rotating_copies(make, wbytes)
            for m in rows:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                us = bench.time_calls(call, [(x, *c) for c in copies])
                gbps = (wbytes + 2 * m * (k + n)) / us / 1e3
                print(f"{a.tag} {op} {n}x{k} {m} {us:.1f} {gbps:.0f}", flush=True)
            del copies
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
