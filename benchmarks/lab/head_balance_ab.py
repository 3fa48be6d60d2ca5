"""The output head's column tiles side by side (a lab): head_logits and head_argmax (bf16, K = 5120) under
QWEN38_HEAD_BALANCE 0 / 1 (whole waves of near-equal tiles, csrc/gemm/head_kernel.cu head_plan) and the
column-tile knobs, us per call at 1 / 16 / 32 rows, graph-timed on rotating cold copies (best of --reps
timings, qwen38_kernels.bench), with the share of this run's read ceiling. Every configuration must give
the default's bits (checked here at every row count 1..32 before timing; tests/test_head.py too).

    python benchmarks/lab/head_balance_ab.py [--out FILE.md] [--reps 3] [--vocab 32768,248320]

The question (NOTES item 12 / session 39): the 32768-row draft vocabulary is 512 tiles of 64 columns on the
H200's 264 CTA slots (1.94 waves); if a partial wave costs about a full one, 528 tiles of 56-64 columns
(2 whole waves) should take ~3% off, the gap to the issue's 90% of the ceiling at 16 / 32 rows.
"""
from __future__ import annotations

import argparse

import torch

from qwen38_kernels import bench

K = 5120
CONFIGS = {
    "default (64 columns, 8 stages)": {},
    "balance": {"QWEN38_HEAD_BALANCE": "1"},
    "balance, 4 stages": {"QWEN38_HEAD_BALANCE": "1", "QWEN38_HEAD_NARROW_STAGES": "4"},
    "32 columns, 8 stages": {"QWEN38_HEAD_COLS": "32", "QWEN38_HEAD_NARROW_STAGES": "8"},
    "32 columns, 8 stages, balance": {"QWEN38_HEAD_COLS": "32", "QWEN38_HEAD_NARROW_STAGES": "8",
                                      "QWEN38_HEAD_BALANCE": "1"},
    "128 columns": {"QWEN38_HEAD_COLS": "128"},
}


def _logits(x, w):
    return torch.ops.qwen38.head_logits(x, w)


def _argmax(x, w):
    return torch.ops.qwen38.head_argmax(x, w)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vocab", default="32768,248320")
    ap.add_argument("--argmax", action="store_true", help="also time head_argmax")
    ap.add_argument("--rows", default="1,16,32", help="comma-separated row counts to time")
    ap.add_argument("--no-check", action="store_true", help="time without the bits check (a lab build whose "
                    "kernel computes other numbers on purpose)")
    ap.add_argument("--configs", default="", help="comma-separated configuration numbers (0 = the default; "
                    "default: all)")
    a = ap.parse_args(argv)
    names = list(CONFIGS)
    chosen = [names[int(i)] for i in a.configs.split(",")] if a.configs else names
    rows = tuple(int(r) for r in a.rows.split(","))
    ceiling = bench.measure_read_ceiling()
    lines = [f"# head column tiles A/B ({bench.gpu_name()}, read ceiling {ceiling:.0f} GB/s, best of {a.reps})", "",
             "| vocabulary | op | configuration | " + " | ".join(f"{m} rows us (% ceil)" for m in rows) + " |",
             "|---|---|---|" + "---|" * len(rows)]
    torch.manual_seed(0)
    for v in (int(s) for s in a.vocab.split(",")):
        w = torch.randn(v, K, dtype=torch.bfloat16, device="cuda") * K ** -0.5
        x = torch.randn(32, K, dtype=torch.bfloat16, device="cuda")
        ref = [_logits(x[:m], w) for m in range(1, 33)]
        ref_a = [_argmax(x[:m], w) for m in range(1, 33)]
        for op_name, fn in (("head_logits", _logits), ("head_argmax", _argmax)):
            if op_name == "head_argmax" and not a.argmax:
                continue
            for name in chosen:
                kn = CONFIGS[name]
                g = bench.with_knobs(fn, **kn)
                for m in range(1, 33) if not a.no_check else ():  # the same bits as the default, or no timing
                    got, want = g(x[:m], w), (ref if fn is _logits else ref_a)[m - 1]
                    same = (torch.equal(got, want) if fn is _logits
                            else all(torch.equal(p, q) for p, q in zip(got, want)))
                    if not same:
                        raise SystemExit(f"{name} at {m} rows: other bits than the default ({v}x{K})")
                cells = []
                for m in rows:
                    copies = bench.rotating_copies(
                        lambda i: (torch.randn(m, K, dtype=torch.bfloat16, device="cuda"), w if i == 0 else w.clone()),
                        2 * v * K + 2 * m * K)
                    us = min(bench.time_calls(g, copies, min_calls=20) for _ in range(a.reps))
                    del copies
                    out_bytes = 4 * m * v if fn is _logits else 12 * m
                    pct = (2 * v * K + 2 * m * K + out_bytes) / us / 1e3 / ceiling * 100
                    cells.append(f"{us:.1f} ({pct:.1f}%)")
                lines.append(f"| {v}x{K} | {op_name} | {name} | " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
        del w
        torch.cuda.empty_cache()
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
