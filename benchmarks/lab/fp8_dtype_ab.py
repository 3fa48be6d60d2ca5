"""fp8_block_linear timed with bf16 and fp16 activations on the bench's cold-copy method (lab, no peers).

    python benchmarks/lab/fp8_dtype_ab.py [--shapes 34816x5120,12288x5120] [--rows 1,8,16,32] [--hot] [--out FILE]

Why: with bf16 activations every e4m3 pair of the skinny kernels is decoded through two F2FP
conversions (e4m3 -> fp16, fp32 -> bf16), with fp16 through one; if the conversions bound the
kernel, bf16 is the slower. Prints us per call and % of the read ceiling per (shape, rows, dtype).
--hot times one copy of each argument: weights that fit in L2 stay there, so the bound is no longer
the memory's and the kernels' instruction counts show (the percentages are then of the HBM ceiling).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from qwen38_kernels import bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_fp8 import _quantize_on_gpu  # noqa: E402  (the bench's chunked quantizer: whole 128-row tiles)

OPS = torch.ops.qwen38


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="34816x5120,12288x5120,5120x17408")
    ap.add_argument("--rows", default="1,8,16,32")
    ap.add_argument("--hot", action="store_true", help="one copy of the arguments (warm in L2 if they fit)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    ceiling = bench.measure_read_ceiling()
    lines = [f"device {torch.cuda.get_device_name()}, read ceiling {ceiling:.0f} GB/s" + (", hot" if a.hot else ""),
             "| shape | rows | bf16 us | bf16 % | fp16 us | fp16 % |", "|---|---|---|---|---|---|"]
    for shape in a.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        q = _quantize_on_gpu(torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5)
        wbytes = n * k + q.weight_scale_inv.numel() * 4
        for m in (int(r) for r in a.rows.split(",")):
            row = [shape, str(m)]
            for dt in (torch.bfloat16, torch.float16):
                nbytes = wbytes + m * k * 2 + m * n * 2
                base = bench.rotating_copies(
                    lambda i: (torch.randn(m, k, device="cuda", dtype=dt),
                               q.weight if i == 0 else q.weight.clone(), q.weight_scale_inv), nbytes,
                    factor=0.0 if a.hot else 12.0)
                us = bench.time_calls(lambda x, w, s: OPS.fp8_block_linear(x, w, s, None, None), base)
                row += [f"{us:.2f}", f"{100 * nbytes / us / 1e3 / ceiling:.1f}"]
                del base
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], file=sys.stderr)
        del q
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
