"""Benchmark the causal conv1d ops (width 4, + silu, 10240 channels) on the GPU.

    python benchmarks/bench_conv.py [--quick] [--out benchmarks/results/<gpu>/]

Ops: ``torch.ops.qwen38.conv_step`` (B sequences, one token), ``conv_chain`` (T tokens),
``conv_tree`` (T nodes, a binary-ish depth-first tree) and ``conv_commit``, bf16, conv_state rows
rotated (one per sequence). There is no peer with this contract (verify == decode bit for bit);
the numbers are launch-latency bound and serve the decode-round sum. bytes = x read + y written +
the state rows read (and written for step/commit) + the weight.
Writes conv.json / conv.meta.json / conv.md / conv.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from qwen38_kernels import bench, knobs  # the package import registers torch.ops.qwen38

OP = "conv"
C = 10240
ES = 2
BATCHES = (1, 8, 32)
QUICK_BATCHES = (1, 8)
TOKENS = (4, 16)


def _tree_parents(t: int, batch: int) -> torch.Tensor:
    par, path = [], [-1]
    for i in range(t):  # depth-first: alternate going deeper and branching at the same depth
        d = len(path) if i % 3 else max(1, len(path) - 1)
        par.append(path[d - 1])
        del path[d:]
        path.append(i)
    return torch.tensor([par] * batch, device="cuda")


def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    records, failures = [], []
    ops = torch.ops.qwen38
    w = torch.randn(C, 4, device="cuda").bfloat16()
    for b in (QUICK_BATCHES if quick else BATCHES):
        for name, t in [("conv_step", 1)] + [(n, t) for t in TOKENS for n in ("conv_chain", "conv_tree", "conv_commit")]:
            def make(i, b=b, t=t):
                x = torch.randn(b, t, C, device="cuda").bfloat16()
                cs = torch.randn(b, C, 3, device="cuda").bfloat16()
                return x, cs, torch.arange(b, device="cuda"), _tree_parents(t, b), torch.full((b,), t // 2, device="cuda")
            state_bytes = b * C * 3 * ES
            if name == "conv_step":
                fn = lambda x, cs, s, p, a: ops.conv_step(x[:, 0], cs, w, s)  # noqa: E731
                nbytes = b * C * ES * 2 + 2 * state_bytes + C * 4 * ES
            elif name == "conv_chain":
                fn = lambda x, cs, s, p, a: ops.conv_chain(x, cs, w, s)  # noqa: E731
                nbytes = 2 * b * t * C * ES + state_bytes + C * 4 * ES
            elif name == "conv_tree":
                fn = lambda x, cs, s, p, a: ops.conv_tree(x, cs, w, s, p)  # noqa: E731
                nbytes = 2 * b * t * C * ES + state_bytes + C * 4 * ES
            else:
                fn = lambda x, cs, s, p, a: ops.conv_commit(x, cs, s, a, p)  # noqa: E731
                nbytes = 3 * b * C * ES + 2 * state_bytes
            shape = f"{name} B={b} T={t}"
            try:
                base = bench.rotating_copies(make, b * t * C * ES + state_bytes)
                with knobs.override(QWEN38_CONV_CHECK_INDICES="0"):  # no host copies in the warm-up either
                    us = bench.time_calls(fn, base)
            except Exception as e:
                failures.append(f"{shape}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}")
                print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                continue
            records.append(bench.Record.from_timing(OP, "qwen38", shape, None, None, b, us, nbytes, ceiling))
    if failures:
        meta["failures"] = failures
    return records, meta


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("conv", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"batches {QUICK_BATCHES}",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
