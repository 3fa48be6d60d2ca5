"""Programmatic dependent launch on and off (QWEN38_PDL), side by side (a lab): us per call of the
weight readers at the decode / verify row counts, graph-timed back to back on rotating cold weights
(qwen38_kernels.sweep's timing), the same op each call. Every kernel lets its successor in at its
start (pdl.cuh) except the head's tiles kernel (after its main loop, session 13): with a grid under
one wave the successor's CTAs take the free CTA slots early, and where they land decides how evenly
the successor's grid spreads over the SMs. The question: what that costs each op, and whether
QWEN38_SPREAD=1 (the default since session 13: unread shared memory capping a grid under one wave at ceil(CTAs / SMs) an SM:
csrc/common/launch.cuh) takes the cost away (the head's tiles kernel takes no such cap: "-").

    python benchmarks/lab/pdl_ab.py [--out FILE.md]
"""
from __future__ import annotations

import argparse
import sys

import torch

from qwen38_kernels import bench, knobs, sweep

SHAPES = ((34816, 5120), (12288, 5120), (6144, 5120), (5120, 17408))
ROWS = (1, 16, 32)
HEAD_V = (32768, 248320)
CONFIGS = {"on": {"QWEN38_PDL": "1", "QWEN38_SPREAD": "0"}, "spread": {"QWEN38_PDL": "1", "QWEN38_SPREAD": "1"},
           "off": {"QWEN38_PDL": "0", "QWEN38_SPREAD": "0"}}


def _head_us(v: int, m: int, x: torch.Tensor) -> float:
    copies = bench.rotating_copies(lambda i: (torch.randn(v, 5120, device="cuda", dtype=torch.bfloat16),), 2 * v * 5120)
    return bench.time_calls(lambda w: torch.ops.qwen38.head_logits(x[:m], w), copies, repeats=5, min_calls=20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    lines = [f"# PDL on / off, us per call ({bench.gpu_name()}, graph-timed, cold weights)", "",
             "| op | shape | rows | PDL on | PDL on, spread | PDL off | off / on |", "|---|---|---|---|---|---|---|"]

    def row(op, shape, m, us):
        sp = f"{us['spread']:.1f}" if "spread" in us else "-"
        lines.append(f"| {op} | {shape} | {m} | {us['on']:.1f} | {sp} | {us['off']:.1f} | {us['off'] / us['on']:.3f} |")
        print(op, shape, m, {c: round(u, 1) for c, u in us.items()}, flush=True)

    x = torch.randn(32, 17408, device="cuda", dtype=torch.bfloat16)
    for op in ("nvfp4_linear", "fp8_block_linear"):
        fn = sweep._call(op)
        for n, k in SHAPES:
            weights = sweep.make_weights(op, n, k)
            xk = x[:, :k].contiguous()
            for m in ROWS:
                us = {}
                for c, kn in CONFIGS.items():
                    with knobs.override(**kn):
                        us[c] = sweep._time(fn, op, n, k, m, weights, xk)
                row(op, f"{n}x{k}", m, us)
            del weights
            torch.cuda.empty_cache()
    xh = x[:, :5120].contiguous()
    for v in HEAD_V:
        for m in (1, 32):
            us = {}
            for c in ("on", "off"):
                with knobs.override(**CONFIGS[c]):
                    us[c] = _head_us(v, m, xh)
            row("head_logits", f"{v}x5120", m, us)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
