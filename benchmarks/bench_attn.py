"""Benchmark decode attention (attn_decode) on the GPU against torch SDPA on the same data.

    python benchmarks/bench_attn.py [--quick] [--out benchmarks/results/<gpu>/]

The model's geometry: 24 q heads, 4 kv heads, head dim 256, bf16, one sequence; a committed prefix of
1K..32K keys and T = 1 / 4 / 16 / 32 query rows (a decode token, chain verifies) whose own keys follow
it in the cache (HF's layout [B, Hkv, L, D]). Providers, same inputs:
  qwen38  the CUDA kernels of attn_decode (csrc/attn, torch.ops.qwen38._attn_decode_kernel: a chain, mask None)
  sdpa    torch.nn.functional.scaled_dot_product_attention(enable_gqa=True) on q as [B, Hq, T, D] and
          the cache sliced to the sequence, with the chain's [T, L] boolean mask for T > 1
bytes = the K and V of the sequence read once + q read + o written (what a call must move; the token
groups of a verify re-read K and V through L2, which this does not count). Timed with CUDA graphs over
rotating copies whose total exceeds 12x L2 (cold reads; qwen38_kernels.bench). Writes attn.json /
attn.meta.json / attn.md / attn.png (qwen38_kernels.bench.write_results).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from qwen38_kernels import bench  # the package import registers torch.ops.qwen38

OP = "attn_decode"
HQ, HKV, D = 24, 4, 256
ES = 2  # bf16
PREFIXES = (1024, 4096, 8192, 16384, 32768)
QUICK_PREFIXES = (1024, 8192, 32768)
ROWS = (1, 4, 16, 32)


def _chain_mask(prefix: int, t: int) -> torch.Tensor:
    """SDPA's boolean mask of a chain verify: row j sees the prefix and rows 0..j."""
    cols = torch.arange(prefix + t, device="cuda")
    return cols[None, :] <= (prefix + torch.arange(t, device="cuda"))[:, None]


def run(quick: bool = False, ceiling: float | None = None) -> tuple[list[bench.Record], dict]:
    meta: dict = {"geometry": f"Hq {HQ}, Hkv {HKV}, D {D}, bf16, B 1, chain"}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    records, failures = [], []
    ops = torch.ops.qwen38
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = [(p, t) for p in (QUICK_PREFIXES if quick else PREFIXES) for t in ROWS]
    for prefix, t in bench.progress(cases, "attn"):
        slots = prefix + t
        kv_bytes = 2 * HKV * slots * D * ES
        nbytes = kv_bytes + 2 * t * HQ * D * ES

        def make(i, t=t, slots=slots):
            g = torch.Generator(device="cuda").manual_seed(i)
            q = torch.randn(1, t, HQ, D, device="cuda", generator=g).bfloat16()
            k = torch.randn(1, HKV, slots, D, device="cuda", generator=g).bfloat16()
            v = torch.randn(1, HKV, slots, D, device="cuda", generator=g).bfloat16()
            return q, k, v, torch.tensor([slots], device="cuda", dtype=torch.int32)

        mask = _chain_mask(prefix, t) if t > 1 else None
        providers = {
            "qwen38": lambda q, k, v, kl: ops._attn_decode_kernel(q, k, v, kl),  # the kernels (QWEN38_ATTN_KERNEL=1)
            "sdpa": lambda q, k, v, kl: sdpa(q.transpose(1, 2), k, v, attn_mask=mask, enable_gqa=True),
        }
        shape = f"prefix={prefix} T={t}"
        try:
            base = bench.rotating_copies(make, kv_bytes)
        except Exception as e:  # (device memory)
            failures.append(f"{shape}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}")
            print(f"\nFAILED {failures[-1]}", file=sys.stderr)
            continue
        for name, fn in providers.items():
            try:
                us = bench.time_calls(fn, base)
            except Exception as e:
                failures.append(f"{name} {shape}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}")
                print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                continue
            records.append(bench.Record.from_timing(OP, name, shape, None, None, t, us, nbytes, ceiling))
        del base
        torch.cuda.empty_cache()
    if failures:
        meta["failures"] = failures
    return records, meta


def main(argv: list[str] | None = None) -> int:
    return bench.bench_main("attn", run, description=__doc__.split("\n\n")[0],
                            quick_help=f"prefixes {QUICK_PREFIXES}",
                            results_root=Path(__file__).resolve().parent / "results", argv=argv)


if __name__ == "__main__":
    sys.exit(main())
