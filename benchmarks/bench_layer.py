"""One Qwen3.8-27B GDN decoder layer at B = 1, graph-timed as a whole, beside the sum of its ops timed alone.

    python benchmarks/bench_layer.py [--layers N] [--quick] [--no-trace] [--out DIR]
    python benchmarks/bench_layer.py --smoke      # one eager layer on the CPU (wiring check, no timing)

round.py adds up per-op records, each op timed back to back with itself. Here the ops run in the
order of a real layer, so what one kernel leaves or prefetches for the next (programmatic dependent
launch, L2 contents) counts as it would in a decode round. The layer, for one token (MODEL.md):

    h, r  = add_rms_norm(x, r, w_in)                    input norm (zero-centred)
    qkvz  = nvfp4_linear(h, 16384x5120)                 qkv 10240 + z 6144
    ba    = nvfp4_linear(h, 96x5120)                    b 48 + a 48
    qkv   = conv_step(qkvz[:, :10240], conv_state, conv_w, slots)
    o     = gdn_step_raw(q, k, v, a, b, A_log, dt_bias, pool, slots)   q, k, v: views of qkv
    o     = rms_norm_gated(o, z, w_gated)
    y     = nvfp4_linear(o, 5120x6144)
    h, r  = add_rms_norm(y, r, w_post)                  post-attention norm
    gu    = nvfp4_linear(h, 34816x5120)                 gate 17408 + up 17408
    act   = silu_mul(gu)                                 round(round(silu(gate)) * up)
    x     = nvfp4_linear(act, 5120x17408)

``--layers`` distinct layers (~190 MB of NVFP4 weights each; by default enough that even the smallest
weight alone, rotated over the layers, reads cold: 39 on the H200, ~8 GB) are called in turn; the graph
holds at least 200 layer calls. Each op alone is timed
the same way on the same tensors (its arguments captured from an eager pass): rotating over a few
layers, an op that touches few bytes (norms, the 96-row projection, conv, the GDN step's activations)
reads them warm alone, unlike bench_norm / bench_nvfp4 / bench_gdn, whose copies exceed the L2. Each op's
cost in place is the layer's time less that of the layer without it. The random weights (uniform packed
bytes, block scales in [0.5, 2)) make timing inputs, not a model. Writes layer.md
and layer.json into ``--out`` (default benchmarks/results/<gpu>).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import qwen38_kernels  # noqa: F401  (registers torch.ops.qwen38)
from qwen38_kernels import bench, ops

HIDDEN, INTER = 5120, 17408
QKV, Z, HV, HK, D = 10240, 6144, 48, 16, 128
SHAPES = {"qkvz": (QKV + Z, HIDDEN), "ba": (2 * HV, HIDDEN), "out": (HIDDEN, HV * D),
          "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}
POOL_ROWS = 2


def _nvfp4(n: int, k: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device)
    scale = (torch.rand(n, k // 16, device=device) * 1.5 + 0.5).to(torch.float8_e4m3fn)
    return packed, scale, torch.tensor(2.0 ** -6, device=device)


def make_layer(device, dtype=torch.bfloat16) -> dict:
    """Weights and state of one GDN layer (random), and the slot it decodes into."""
    layer = {name: _nvfp4(n, k, device) for name, (n, k) in SHAPES.items()}
    layer.update(
        w_in=torch.randn(HIDDEN, dtype=dtype, device=device) * 0.1,
        w_post=torch.randn(HIDDEN, dtype=dtype, device=device) * 0.1,
        w_gated=torch.ones(D, dtype=dtype, device=device),
        conv_w=torch.randn(QKV, 4, dtype=dtype, device=device) * 0.5,
        conv_state=torch.randn(POOL_ROWS, QKV, 3, dtype=dtype, device=device),
        A_log=torch.randn(HV, device=device) * 0.5,
        dt_bias=torch.randn(HV, device=device) * 0.5,
        pool=torch.randn(POOL_ROWS, HV, D, D, device=device) * 0.01,
        slots=torch.tensor([1], dtype=torch.int32, device=device),
    )
    return layer


def layer_ops(L: dict, ba_first: bool = False) -> list[tuple[str, callable]]:
    """The layer as (name, fn(env)) steps; each reads its inputs from and writes its outputs to env.
    ``ba_first``: the b+a projection before qkv+z (both read h; an engine may run them in either order)."""
    def lin(name, src, dst):
        def step(env):
            env[dst] = ops.nvfp4_linear(env[src], *L[name])
        return (f"nvfp4_linear {SHAPES[name][0]}x{SHAPES[name][1]} ({name})", step)

    def norm_in(env):
        env["h"], env["r"] = ops.add_rms_norm(env["x"], env["r"], L["w_in"])

    def conv(env):
        env["qkv"] = ops.conv_step(env["qkvz"][:, :QKV], L["conv_state"], L["conv_w"], L["slots"])

    def gdn(env):
        qkv, ba = env["qkv"], env["ba"]
        q = qkv[:, :HK * D].view(1, HK, D)
        k = qkv[:, HK * D:2 * HK * D].view(1, HK, D)
        v = qkv[:, 2 * HK * D:].view(1, HV, D)
        env["o"] = ops.gdn_step_raw(q, k, v, ba[:, HV:], ba[:, :HV], L["A_log"], L["dt_bias"], L["pool"],
                                    L["slots"])

    def gated(env):
        z = env["qkvz"][:, QKV:].view(1, HV, D)
        env["o2"] = ops.rms_norm_gated(env["o"], z, L["w_gated"]).view(1, HV * D)

    def norm_post(env):
        env["h"], env["r"] = ops.add_rms_norm(env["y"], env["r"], L["w_post"])

    def silu_mul(env):
        env["act"] = ops.silu_mul(env["gu"])

    projections = [lin("qkvz", "h", "qkvz"), lin("ba", "h", "ba")]
    if ba_first:
        projections.reverse()
    return [("add_rms_norm 5120 (input)", norm_in), *projections,
            ("conv_step", conv), ("gdn_step_raw", gdn), ("rms_norm_gated 48x128", gated),
            lin("out", "o2", "y"), ("add_rms_norm 5120 (post)", norm_post), lin("gate_up", "h", "gu"),
            ("silu_mul 17408", silu_mul), lin("down", "act", "x")]


def run_layer(steps, env) -> None:
    for _, fn in steps:
        fn(env)


def trace_layer(steps, envs, rotations: int = 4) -> list[dict]:
    """The layer's kernels as the GPU ran them: a graph of ``rotations`` x layers layer calls replayed
    under torch.profiler (CUPTI kernel records, graph kernels included). Per kernel position of a
    layer call, the median over the calls (the first and last left out) of its start past the layer's
    first kernel, its duration and its gap after the previous kernel's end (negative: they overlap,
    as a dependent launch lets them)."""
    from torch.profiler import ProfilerActivity, profile

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(rotations):
            for s, e in zip(steps, envs):
                run_layer(s, e)
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                      and not e.name.lower().startswith(("memcpy", "memset"))), key=lambda e: e.time_range.start)
    calls = rotations * len(steps)
    if not kernels or len(kernels) % calls:
        print(f"trace: {len(kernels)} kernel records for {calls} layer calls; no per-layer table", file=sys.stderr)
        return []
    per = len(kernels) // calls
    rows = []
    for j in range(per):
        starts, durs, gaps = [], [], []
        for c in range(1, calls - 1):
            first = kernels[c * per].time_range.start
            e, prev = kernels[c * per + j], kernels[c * per + j - 1]
            starts.append(e.time_range.start - first)
            durs.append(e.time_range.end - e.time_range.start)
            gaps.append(e.time_range.start - prev.time_range.end)
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        rows.append({"kernel": kernels[j].name, "start_us": round(med(starts), 2), "dur_us": round(med(durs), 2),
                     "gap_us": round(med(gaps), 2)})
    period = [kernels[(c + 1) * per].time_range.start - kernels[c * per].time_range.start for c in range(1, calls - 1)]
    rows.append({"kernel": "(next layer)", "start_us": round(sorted(period)[len(period) // 2], 2), "dur_us": 0.0,
                 "gap_us": 0.0})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=0,
                   help="distinct layers called in turn (default: enough for every weight alone to read cold)")
    p.add_argument("--out", type=Path, default=None, help="result folder (default benchmarks/results/<gpu>)")
    p.add_argument("--quick", action="store_true", help="8 layers unless --layers says (scripts/gpu_run.sh --quick)")
    p.add_argument("--smoke", action="store_true", help="one eager layer on the CPU, no timing")
    p.add_argument("--no-trace", action="store_true", help="skip the kernel timeline (torch.profiler)")
    p.add_argument("--ba-first", action="store_true",
                   help="the b+a projection before qkv+z (its cluster kernel then follows the norm, not a full grid)")
    args = p.parse_args(argv)
    if args.layers < 0:
        p.error("--layers must be at least 1 (0 or unset: the default)")
    if args.quick and args.layers == 0:
        args.layers = 8  # the layer cold (~1.5 GB of weights), the smaller weights alone partly warm
    torch.manual_seed(0)

    if args.smoke:
        L = make_layer("cpu")
        env = {"x": torch.randn(1, HIDDEN, dtype=torch.bfloat16),
               "r": torch.randn(1, HIDDEN, dtype=torch.bfloat16)}
        run_layer(layer_ops(L, args.ba_first), env)
        print(f"smoke: one layer on the CPU, x {tuple(env['x'].shape)} {env['x'].dtype}, "
              f"finite {bool(torch.isfinite(env['x']).all())}")
        return 0
    if not torch.cuda.is_available():
        print("bench_layer needs a CUDA device (or --smoke)", file=sys.stderr)
        return 2

    dev = "cuda"
    if args.layers == 0:
        # Each op alone rotates over the layers' copies of its weight: the smallest (the out projection,
        # ~18 MB) needs 12x L2 of copies to read cold (bench.rotating_copies, cold_s33.md); at most 8 GiB.
        nbytes = {name: n * k // 2 + n * k // 16 for name, (n, k) in SHAPES.items()}  # packed + scales
        small = min(b for name, b in nbytes.items() if name != "ba")
        per_layer = sum(nbytes.values())
        args.layers = max(4, min(-(-12 * bench.l2_bytes() // small), (8 << 30) // per_layer))
    layers = [make_layer(dev) for _ in bench.progress(range(args.layers), "building layers")]
    steps = [layer_ops(L, args.ba_first) for L in layers]
    envs = [{"x": torch.randn(1, HIDDEN, dtype=torch.bfloat16, device=dev),
             "r": torch.randn(1, HIDDEN, dtype=torch.bfloat16, device=dev)} for _ in layers]
    for s, e in zip(steps, envs):  # an eager pass fills every env with its tensors
        run_layer(s, e)
    torch.cuda.synchronize()

    # The whole layer: fn(i) runs layer i on its own env (its output x feeds its next call).
    layer_us = bench.time_calls(lambda i: run_layer(steps[i], envs[i]), [(i,) for i in range(args.layers)])
    # Each op alone, rotating over the same layers (each op's inputs are in its env already).
    per_op = {}
    for j, (name, _) in enumerate(bench.progress(steps[0], "ops alone")):
        per_op[name] = bench.time_calls(lambda i, j=j: steps[i][j][1](envs[i]), [(i,) for i in range(args.layers)])
    total = sum(per_op.values())
    # Each op in the layer: the layer's time less that of the layer without the op (its successor then
    # follows its predecessor), so what the op costs in place, overlap with its neighbours included.
    in_layer = {}
    for j, (name, _) in enumerate(bench.progress(steps[0], "layer less one op")):
        def without(i, j=j):
            for jj, (_, fn) in enumerate(steps[i]):
                if jj != j:
                    fn(envs[i])
        in_layer[name] = layer_us - bench.time_calls(without, [(i,) for i in range(args.layers)])

    trace = []
    if not args.no_trace:
        try:
            trace = trace_layer(steps, envs)
        except Exception as exc:  # the profiler is optional: the timings above stand without it
            print(f"trace: torch.profiler failed ({type(exc).__name__}: {exc}); no kernel timeline", file=sys.stderr)

    meta = bench.device_meta()
    meta.update(layers=args.layers, ba_first=args.ba_first,
                method="bench.time_calls: one CUDA graph of >= 200 calls rotating over "
                f"{args.layers} layers (distinct weights: cold reads), median of 9 replays, us per call")
    result = {"meta": meta, "layer_us": round(layer_us, 2), "ops_alone_us": {k: round(v, 2) for k, v in per_op.items()},
              "ops_alone_sum_us": round(total, 2), "ops_in_layer_us": {k: round(v, 2) for k, v in in_layer.items()},
              "trace": trace}
    lines = [f"# One GDN decoder layer, B = 1, on {meta.get('device', '?')}", "",
             f"- {meta['method']}", "- the layer: MODEL.md's GDN layer + MLP (silu_mul: the library's activation op)",
             "- alone: the same tensors rotated over the layers (small ops read warm)",
             "- in the layer: the layer's time less that of the layer without the op", "",
             "| op | alone (us) | in the layer (us) |", "|---|---|---|"]
    lines += [f"| {k} | {v:.2f} | {in_layer[k]:.2f} |" for k, v in per_op.items()]
    lines += [f"| **sum of the ops alone** | **{total:.2f}** | {sum(in_layer.values()):.2f} |",
              f"| **the layer in one graph** | **{layer_us:.2f}** | |", "",
              f"The layer takes {layer_us:.2f} us against {total:.2f} us for its ops alone "
              f"({(layer_us - total) / total * 100:+.1f}%); the 48 GDN layers of a round (with their MLPs): "
              f"{48 * layer_us / 1e3:.2f} ms."]
    if trace:
        lines += ["", "## The layer's kernels as the GPU ran them (torch.profiler, graph replay)", "",
                  "Medians over the layer calls of one graph: start past the layer's first kernel, duration, and "
                  "the gap after the previous kernel's end (negative: overlapped under the dependent launch).", "",
                  "| kernel | start (us) | duration (us) | gap (us) |", "|---|---|---|---|"]
        lines += [f"| `{r['kernel'][:90]}` | {r['start_us']:.2f} | {r['dur_us']:.2f} | {r['gap_us']:.2f} |"
                  for r in trace]
    out = args.out or Path(__file__).resolve().parent / "results" / bench.gpu_name()
    out.mkdir(parents=True, exist_ok=True)
    (out / "layer.md").write_text("\n".join(lines) + "\n")
    (out / "layer.json").write_text(json.dumps(result, indent=1) + "\n")
    print("\n".join(lines))
    print(f"wrote {out / 'layer.md'} and {out / 'layer.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
