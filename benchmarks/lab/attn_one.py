"""One attn_decode call at the model's geometry, repeated, for a profiler (a lab; NOTES item 20):

    ncu --set full -k regex:attn_ --launch-skip 6 --launch-count 2 -o $OUT/attn_1k \
        python3 benchmarks/lab/attn_one.py --prefix 1024 --t 1

24 q / 4 kv heads of 256, bf16, one sequence, a chain of --t rows after --prefix keys; --calls eager calls
(the index values are not copied to the host: QWEN38_ATTN_CHECK_INDICES=0), so the split and merge kernels of
the last calls are warm in the instruction cache but read K and V from wherever the previous call left them
(ncu flushes the caches between kernels by default). Knobs (QWEN38_ATTN_SLOTS, QWEN38_ATTN_SPLIT) apply.
"""
from __future__ import annotations

import argparse
import os

import torch

os.environ.setdefault("QWEN38_ATTN_CHECK_INDICES", "0")
import qwen38_kernels as q  # noqa: E402  (after the knob)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", type=int, default=1024)
    ap.add_argument("--t", type=int, default=1)
    ap.add_argument("--calls", type=int, default=4)
    a = ap.parse_args(argv)
    from qwen38_kernels.__main__ import _attn_args
    args = _attn_args(a.t, a.prefix, seed=0)
    for _ in range(a.calls):
        out = q.attn_decode(*args)
    torch.cuda.synchronize()
    print(f"attn_decode prefix {a.prefix} T {a.t}: {a.calls} calls, |o| sum {float(out.float().abs().sum()):.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
