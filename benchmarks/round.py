"""Sum one Qwen3.8-27B decode round from the per-op timings the benchmarks recorded (no GPU needed).

    python benchmarks/round.py [--results benchmarks/results/h200] [--context 8192] [--out DIR]

Kernel timings rank ops; the round decides (DESIGN.md). This reads the records of bench_norm,
bench_nvfp4, bench_head, bench_gdn, bench_conv and bench_attn (``<results>/<bench>.json``, provider ``qwen38``)
and adds up the ops of one round of the NVFP4 model for one sequence, in two shapes of round:

  decode      one token (every op at 1 row; GDN and conv one step)
  verify 16   a 16-token chain verify with the previous round's accepted tokens committed in the
              same kernels (every op at 16 rows; ``gdn_commit_verify``: commit 8 + chain 16; conv
              chain of 16 + its commit)

Per layer (64 = 16 x [GDN, GDN, GDN, attention], MODEL.md), with the engines' fused weight shapes:
  every layer   add_rms_norm (input), add_rms_norm (post-attention), MLP gate+up 34816x5120,
                silu_mul 17408, down 5120x17408
  GDN (48)      qkv+z 16384x5120, b+a 96x5120, conv, GDN, rms_norm_gated (48 heads), out 5120x6144
  attn (16)     q+k+v 14336x5120, q norm and k norm (the 24x256 q-slice record for each), the
                attention itself (bench_attn's record at a prefix of --context keys), o_proj 5120x6144
  once          final rms_norm, head_logits 248320x5120 (bf16 head)
Where bench_head also timed the head's weight in NVFP4 (provider ``qwen38 nvfp4 head``), two more rounds
use that instead of the bf16 head. A record at the exact row count is used when there is one, else the
next larger row count (an upper bound, marked ``>=``); an op with no record at all (RoPE: not a library
op; decode attention where bench_attn did not run at that prefix) is listed as missing, and the total is
a lower bound.
Writes round.md and round.json into ``--out`` (default: the results folder).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

GDN_LAYERS, ATTN_LAYERS = 48, 16
NVFP4_HEAD = "qwen38 nvfp4 head"  # bench_head's provider: the head's weight in NVFP4 (nvfp4_linear, fp32 out)
GB10_GBPS = 230.0  # GB10 (DGX Spark) LPDDR5X read bandwidth a stream reaches (the brief's figure)
LAYERS = GDN_LAYERS + ATTN_LAYERS


@dataclass
class Line:
    what: str
    count: int
    us_each: float | None  # None: no record
    rows_used: int | None = None
    note: str = ""
    floor_each: float | None = None  # us of the record's bytes at the run's read ceiling
    bytes_each: float | None = None  # the record's bytes

    @property
    def us(self) -> float:
        return 0.0 if self.us_each is None else self.us_each * self.count

    @property
    def floor_us(self) -> float:
        return 0.0 if self.floor_each is None else self.floor_each * self.count


@dataclass
class Round:
    name: str
    rows: int
    lines: list[Line] = field(default_factory=list)

    @property
    def total_us(self) -> float:
        return sum(x.us for x in self.lines)

    @property
    def floor_us(self) -> float:
        return sum(x.floor_us for x in self.lines)

    @property
    def bytes(self) -> float:
        return sum(x.bytes_each * x.count for x in self.lines if x.bytes_each is not None)

    @property
    def missing(self) -> list[str]:
        return [x.what for x in self.lines if x.us_each is None]


class Records:
    """The ``qwen38`` records of the benchmark JSON files in one results folder."""

    def __init__(self, folder: Path):
        self.recs = []
        for bench in ("norm", "nvfp4", "head", "gdn", "conv", "attn"):
            f = folder / f"{bench}.json"
            if f.exists():
                data = json.loads(f.read_text())
                self.recs += [r for r in (data if isinstance(data, list) else data["records"])
                              if r.get("provider") in ("qwen38", NVFP4_HEAD)]

    def at(self, op: str, shape_prefix: str, rows: int, provider: str = "qwen38") -> tuple:
        """(us, rows used, us at the read ceiling, bytes) of ``op`` (``provider``'s record) on the first
        shape starting with ``shape_prefix`` at ``rows`` rows, or at the smallest larger row count
        recorded; Nones if none."""
        cands = sorted((r["M"], r["us"], 1e-3 * r["bytes"] / r["ceiling_GBps"], r["bytes"]) for r in self.recs
                       if r["op"] == op and r.get("provider") == provider and r["shape"].startswith(shape_prefix)
                       and r["M"] >= rows)
        if not cands:
            return None, None, None, None
        return cands[0][1], cands[0][0], cands[0][2], cands[0][3]


def build_round(recs: Records, name: str, rows: int, nvfp4_head: bool = False, context: int = 8192) -> Round:
    rd = Round(name, rows)

    def add(what, count, op, shape, at_rows=None, note="", provider="qwen38"):
        us, used, floor, nbytes = recs.at(op, shape, rows if at_rows is None else at_rows, provider)
        rd.lines.append(Line(what, count, us, used, note, floor, nbytes))

    def gemm(what, count, shape):
        add(f"nvfp4_linear {shape}: {what}", count, "nvfp4_linear", shape)

    add("add_rms_norm 5120 (input, post-attention)", 2 * LAYERS, "add_rms_norm", "5120")
    gemm("MLP gate+up", LAYERS, "34816x5120")
    gemm("MLP down", LAYERS, "5120x17408")
    gemm("GDN qkv+z", GDN_LAYERS, "16384x5120")
    gemm("GDN b+a", GDN_LAYERS, "96x5120")
    gemm("GDN out_proj", GDN_LAYERS, "5120x6144")
    add("rms_norm_gated 48x128", GDN_LAYERS, "rms_norm_gated", "48x128")
    if rows == 1:
        add("conv_step", GDN_LAYERS, "conv", "conv_step B=1")
        add("gdn_step", GDN_LAYERS, "gdn_step", "B sequences")
    else:
        add(f"conv_chain T={rows}", GDN_LAYERS, "conv", f"conv_chain B=1 T={rows}", at_rows=1)
        add(f"conv_commit T={rows}", GDN_LAYERS, "conv", f"conv_commit B=1 T={rows}", at_rows=1)
        add(f"gdn_commit_verify (commit 8 + chain {rows})", GDN_LAYERS, "gdn_commit_verify", "1 sequence")
    gemm("attention q+k+v", ATTN_LAYERS, "14336x5120")
    add("rms_norm q norm and k norm (24x256 q-slice record)", 2 * ATTN_LAYERS, "rms_norm", "24x256")
    add(f"decode attention ({rows} quer{'y' if rows == 1 else 'ies'}, {context}-key prefix)", ATTN_LAYERS,
        "attn_decode", f"prefix={context} T=", note=f"no bench_attn record at a {context}-key prefix")
    gemm("attention o_proj", ATTN_LAYERS, "5120x6144")
    add("silu_mul 17408 (MLP activation)", LAYERS, "silu_mul", "2x17408")
    rd.lines.append(Line("RoPE", ATTN_LAYERS, None, note="not a library op"))
    add("rms_norm 5120 (final)", 1, "rms_norm", "5120")
    if nvfp4_head:
        add("nvfp4_linear 248320x5120 (the head in NVFP4, fp32 logits)", 1, "head", "248320x5120",
            provider=NVFP4_HEAD)
    else:
        add("head_logits 248320x5120 (bf16)", 1, "head", "248320x5120")
    return rd


def to_markdown(rounds: list[Round], folder: Path) -> str:
    out = [f"# One Qwen3.8-27B decode round from the recorded per-op timings ({folder.name})", "",
           "Sum of `qwen38` records (graph-timed, cold weights) times their count per round; `>= M`: the",
           "record at the next larger row count M was used (an upper bound). Missing ops make each total",
           "a lower bound. `at the ceiling`: the bytes the records count (weights, activations, states)",
           "moved at the read ceiling of their run: what the op would take if it streamed at that ceiling.",
           ""]
    for rd in rounds:
        out += [f"## {rd.name} ({rd.rows} row{'s' if rd.rows > 1 else ''} per op)", "",
                "| op | count | us each | us per round | share | at the ceiling |", "|---|---|---|---|---|---|"]
        for x in sorted(rd.lines, key=lambda x: -x.us):
            if x.us_each is None:
                out.append(f"| {x.what} | {x.count} | missing ({x.note}) | - | - | - |")
                continue
            each = f"{x.us_each:.2f}" + (f" (>= {x.rows_used})" if x.rows_used not in (None, rd.rows) and
                                          not x.what.startswith(("conv_", "gdn_commit")) else "")
            out.append(f"| {x.what} | {x.count} | {each} | {x.us:.0f} | {100 * x.us / rd.total_us:.1f}% | "
                       f"{x.floor_us:.0f} |")
        out += ["", f"**Total: {rd.total_us / 1000:.2f} ms** per round"
                + (f" without {', '.join(rd.missing)}" if rd.missing else "")
                + f"; the same bytes at the read ceiling: {rd.floor_us / 1000:.2f} ms; {rd.bytes / 1e9:.2f} GB, "
                f"which take {rd.bytes / GB10_GBPS / 1e6:.1f} ms at GB10's {GB10_GBPS:.0f} GB/s.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results" / "h200")
    ap.add_argument("--context", type=int, default=8192,
                    help="the committed prefix (keys) of the attention records used (bench_attn: 1024..32768)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    recs = Records(args.results)
    if not recs.recs:
        print(f"no benchmark records in {args.results}", file=sys.stderr)
        return 1
    ctx = args.context
    rounds = [build_round(recs, "decode", 1, context=ctx), build_round(recs, "verify 16", 16, context=ctx)]
    if recs.at("head", "248320x5120", 1, NVFP4_HEAD)[0] is not None:  # bench_head timed an NVFP4 head
        rounds += [build_round(recs, "decode, NVFP4 head", 1, nvfp4_head=True, context=ctx),
                   build_round(recs, "verify 16, NVFP4 head", 16, nvfp4_head=True, context=ctx)]
    out = args.out or args.results
    out.mkdir(parents=True, exist_ok=True)
    md = to_markdown(rounds, args.results)
    (out / "round.md").write_text(md + "\n")
    (out / "round.json").write_text(json.dumps(
        [{"name": r.name, "rows": r.rows, "total_us": r.total_us, "floor_us": r.floor_us, "bytes": r.bytes,
          "gb10_floor_us": r.bytes / GB10_GBPS / 1e3, "missing": r.missing,
          "lines": [asdict(x) | {"us": x.us, "floor_us": x.floor_us} for x in r.lines]} for r in rounds],
        indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
