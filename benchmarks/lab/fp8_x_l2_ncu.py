"""Calls fp8_block_linear (or nvfp4_linear) once per case after warm-up calls, for ncu to profile (lab).

    ncu --kernel-name regex:fp8_stream --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,\\
lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python3 benchmarks/lab/fp8_x_l2_ncu.py [--op fp8|nvfp4] [--cases 5120x17408x32,5120x17408x8,...]

The question (benchmarks/results/h200/NOTES.md, session 44): at 17..32 rows is the stream kernels' bound the
L2's traffic of x? Every CTA of the register-stream kernels covers a few weight rows over all of K, so it
reads all M x K of x: 5120x17408 at 32 rows is 320 CTAs x 1.1 MB = up to 357 MB from L2 (less where the CTAs of
one SM hit in its L1) for 89 MB of weights (57 us on the H200: up to ~6.3 TB/s of L2 reads), 5120x6144 at 32
rows up to 126 MB for 31 MB, 34816x5120 up to 357 MB for 178 MB.
If lts__throughput is near its peak there, sharing x between the CTAs of a cluster (one L2 read of each x
chunk a cluster, multicast to its CTAs' shared memory) is the lever; the same arithmetic holds for NVFP4.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_fp8 import _quantize_on_gpu  # noqa: E402
from bench_nvfp4 import _quantize_on_gpu as _quantize_nvfp4  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="5120x17408x32,5120x17408x8,34816x5120x32,5120x6144x32",
                    help="NxKxM, comma-separated")
    ap.add_argument("--op", choices=("fp8", "nvfp4"), default="fp8")
    a = ap.parse_args(argv)
    for case in a.cases.split(","):
        n, k, m = (int(v) for v in case.split("x"))
        torch.manual_seed(0)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        if a.op == "fp8":
            q = _quantize_on_gpu(w)
            call = lambda: torch.ops.qwen38.fp8_block_linear(x, q.weight, q.weight_scale_inv, None, None)  # noqa: E731
        else:
            q, _ = _quantize_nvfp4(w)
            call = lambda: torch.ops.qwen38.nvfp4_linear(x, q.packed, q.scale, q.global_scale)  # noqa: E731
        del w
        for _ in range(2):
            call()
        torch.cuda.synchronize()
        print(f"{a.op} {n}x{k}, {m} rows: x read by every CTA", flush=True)
        del q
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
