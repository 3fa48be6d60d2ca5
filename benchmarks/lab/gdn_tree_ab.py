"""What the tree verify costs beyond the chain verify (a lab): us per call, graph-timed on rotating
cold state pools (bench_gdn's cases and timing), of
  chain T         gdn_chain_verify of T tokens
  tree-chain T    gdn_tree_verify of T nodes shaped as a chain (node i's parent i - 1): the same work
                  as the chain, so the difference is the tree kernel's own cost (structure checks,
                  path bookkeeping, the node order read from shared memory)
  tree N          gdn_tree_verify of bench_gdn's N-node, depth-8 trees, split (auto) and unsplit
at 1 sequence, 16 q/k heads, 48 v heads, bf16.

    python benchmarks/lab/gdn_tree_ab.py [--out FILE.md] [--label TEXT]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_gdn as bg  # noqa: E402

from qwen38_kernels import bench, knobs  # noqa: E402

OPS = torch.ops.qwen38
CHAIN_T = (1, 8, 16)
TREE_N = (16, 32, 64)


def _time(make, touched, fn) -> float:
    args = bench.rotating_copies(make, touched)
    return bench.time_calls(fn, args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default="")
    a = ap.parse_args(argv)
    lines = [f"# GDN tree verify against the chain verify {a.label} ({bench.gpu_name()}, us per call, graph-timed, cold state)",
             "", "| case | T or N | us |", "|---|---|---|"]

    def row(case, m, us):
        lines.append(f"| {case} | {m} | {us:.2f} |")
        print(case, m, round(us, 2), flush=True)

    slot = lambda: torch.zeros(1, device="cuda", dtype=torch.int32)  # noqa: E731
    chain, tree = OPS.gdn_chain_verify, OPS.gdn_tree_verify
    unsplit = bench.with_knobs(tree, QWEN38_GDN_TREE_SPLIT="1")
    with knobs.override(QWEN38_GDN_CHECK_INDICES="0"):
        for t in CHAIN_T:
            touched = bg.STATE + bg._act_bytes(1, t)
            row("chain", t, _time(lambda i, t=t: (*bg._tokens(1, t), bg._pool(1), slot()), touched, chain))
            par = torch.arange(-1, t - 1, device="cuda", dtype=torch.int32)[None]
            row("tree-chain", t, _time(lambda i, t=t, par=par: (*bg._tokens(1, t), bg._pool(1), slot(), par),
                                       touched, unsplit))
        for n in TREE_N:
            touched = bg.STATE + bg._act_bytes(1, n)
            par = torch.tensor([bg.tree_parents(n)], device="cuda", dtype=torch.int32)
            make = lambda i, n=n, par=par: (*bg._tokens(1, n), bg._pool(1), slot(), par)  # noqa: E731
            row("tree (split auto)", n, _time(make, touched, tree))
            row("tree unsplit", n, _time(make, touched, unsplit))
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
