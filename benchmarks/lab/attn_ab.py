"""attn_decode's CUDA kernels under knob configurations side by side (a lab; no peers, so it is quick):

    python benchmarks/lab/attn_ab.py [--configs "QWEN38_ATTN_SLOTS=3;QWEN38_ATTN_SPLIT=1,64"]
                                     [--prefixes 1024,8192,32768] [--t 1,4,16,32] [--reps 2] [--out FILE.md]

The model's geometry (24 q / 4 kv heads of 256, bf16, one sequence, a chain of T rows after the prefix, as
bench_attn.py): the default configuration, then each of --configs. Configurations are separated by ';', the
KNOB=VALUE pairs of one by ','; a value's own comma (QWEN38_ATTN_SPLIT=MIN,MAX) is written ':'. Every
configuration's output but a split rule's (another sum order) is checked equal to the default's before it is timed;
us per call, best of --reps graph-timed medians over rotating cold copies (qwen38_kernels.bench).
"""
from __future__ import annotations

import argparse

import torch

from qwen38_kernels import bench
from qwen38_kernels.__main__ import _attn_args  # the model's geometry: 24 q / 4 kv heads of 256, bf16

HKV, D = 4, 256


def parse_configs(text: str) -> list[dict[str, str]]:
    """'A=1,B=2:3;C=4' -> [{}, {'A': '1', 'B': '2,3'}, {'C': '4'}] (the default first)."""
    out: list[dict[str, str]] = [{}]
    for cfg in filter(None, (c.strip() for c in text.split(";"))):
        kv = {}
        for pair in filter(None, (p.strip() for p in cfg.split(","))):
            name, _, value = pair.partition("=")
            if not name.startswith("QWEN38_") or not value:
                raise SystemExit(f"--configs: expected KNOB=VALUE, got {pair!r}")
            kv[name] = value.replace(":", ",")
        out.append(kv)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="QWEN38_ATTN_SLOTS=3")
    ap.add_argument("--prefixes", default="1024,8192,32768")
    ap.add_argument("--t", default="1,4,16,32")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    configs = parse_configs(a.configs)
    names = ["default"] + [",".join(f"{k}={v}" for k, v in c.items()) for c in configs[1:]]
    op = torch.ops.qwen38._attn_decode_kernel
    lines = [f"# attn_decode kernel A/B ({bench.gpu_name()}, best of {a.reps}, us per call)", "",
             "| prefix | T | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    print(lines[0], flush=True)
    for prefix in (int(s) for s in a.prefixes.split(",")):
        for t in (int(s) for s in a.t.split(",")):
            copies = bench.rotating_copies(lambda i, t=t, prefix=prefix: _attn_args(t, prefix, seed=i),
                                           2 * HKV * (prefix + t) * D * 2)
            want = op(*copies[0])
            cells = []
            for cfg, name in zip(configs, names):
                fn = bench.with_knobs(op, **cfg)
                # (QWEN38_ATTN_SPLIT is the split rule: another sum order, so other bits - not compared)
                if "QWEN38_ATTN_SPLIT" not in cfg and not torch.equal(fn(*copies[0]), want):
                    raise SystemExit(f"{name}: other bits than the default at prefix {prefix}, T {t}")
                us = min(bench.time_calls(fn, copies) for _ in range(a.reps))
                cells.append(f"{us:.1f}")
            lines.append(f"| {prefix} | {t} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
            del copies
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
