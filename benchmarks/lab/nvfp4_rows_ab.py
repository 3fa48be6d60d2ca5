"""nvfp4_linear timed on the bench's cold-copy method for a few shapes and row counts (lab, no peers).

    python benchmarks/lab/nvfp4_rows_ab.py [--shapes 34816x5120,12288x5120] [--rows 1,4,8] [--out FILE]

For A/B runs of a build setting (benchmarks/lab/rev_ab.sh): prints us per call and % of the read
ceiling per (shape, rows), bf16 activations, bytes counted as bench_nvfp4.py counts them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from qwen38_kernels import bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_nvfp4 import _quantize_on_gpu, activation_bytes, nvfp4_weight_bytes  # noqa: E402

OPS = torch.ops.qwen38


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="34816x5120,17408x5120,12288x5120")
    ap.add_argument("--rows", default="1,4,8,16,32")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    ceiling = bench.measure_read_ceiling()
    lines = [f"device {torch.cuda.get_device_name()}, read ceiling {ceiling:.0f} GB/s, bf16 x",
             "| shape | rows | us | % |", "|---|---|---|---|"]
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        q, _ = _quantize_on_gpu(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5)
        for m in (int(r) for r in a.rows.split(",")):
            nbytes = nvfp4_weight_bytes(n, k) + activation_bytes(m, n, k)
            base = bench.rotating_copies(
                lambda i: (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                           *((q.packed, q.scale) if i == 0 else (q.packed.clone(), q.scale.clone())),
                           q.global_scale), nbytes, factor=12.0)
            us = bench.time_calls(lambda x, p, s, g: OPS.nvfp4_linear(x, p, s, g), base)
            lines.append(f"| {shape} | {m} | {us:.2f} | {100 * nbytes / us / 1e3 / ceiling:.1f} |")
            print(lines[-1], file=sys.stderr)
            del base
        del q
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
