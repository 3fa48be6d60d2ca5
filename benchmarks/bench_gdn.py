"""Benchmark the GDN decode family (step, chain verify, tree verify, commit) against fla, in one run.

    python benchmarks/bench_gdn.py [--quick] [--out benchmarks/results/<gpu>/]

Shapes: one Qwen3.8-27B GDN layer (16 q/k heads, 48 v heads, 128 x 128 fp32 states, bf16 activations).
  gdn_step          B sequences x 1 token                  (M = B)
  gdn_chain_verify  1 sequence x T drafted tokens           (M = T)
  gdn_tree_verify   1 sequence x N nodes, depth 8           (M = N): a spine of 8 nodes with the
                    other nodes hung as leaves and short branches along it (many ancestor rebuilds)
  gdn_commit        B sequences, 8 accepted chain tokens    (M = B)
  gdn_commit_verify 1 sequence: the pending commit of 8 tokens folded into a T-token chain verify
                    (M = T); "qwen38 commit + verify" is QWEN38_COMMIT_IN_VERIFY=0 (two launches)
Providers:
  qwen38        the op (torch.ops.qwen38.*), programmatic dependent launch on
  qwen38 PDL off the same op with QWEN38_PDL=0
  qwen38 unsplit  (tree) QWEN38_GDN_TREE_SPLIT=1: one run of the whole node order per column block
  limit: copy of the same bytes  (step) not a peer: a 16-byte Triton copy of the B state tiles into
                another buffer (qwen38_kernels.bench.copy_bytes): what a stream that reads and writes
                the step's state bytes reaches at that size, ramp-up and drain included
  fla           fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule when importable (q/k
                repeated to 48 heads and the l2 norm in its kernel; it reads initial_state and writes
                a new final state): for the step at B sequences (T = 1), for the chain as T tokens.
                fla has no tree verify and no replay commit.
bytes = state bytes read (+ written by the step and the commit) + activations read + outputs written.
Each timing cycles through rotating copies (state pools and inputs) whose total exceeds L2 (cold).
The per-round summary in the meta (and the Markdown) multiplies by the 48 GDN layers of a round: a
16-token chain verify + an 8-token commit, and the same with the commit's state bytes moved at
GB10's ~230 GB/s (a projection from bytes, not a measurement).
Writes gdn.json / gdn.meta.json / gdn.md / gdn.png and gdn_time.png (us vs tokens/nodes).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import qwen38_kernels as q38
from qwen38_kernels import bench, knobs

OPS = torch.ops.qwen38
HQK, HV, DK, DV = 16, 48, 128, 128
STATE = HV * DK * DV * 4          # bytes of one sequence's fp32 state (3 MiB)
DTYPE = torch.bfloat16
ES = 2
GDN_LAYERS = 48
GB10_GBPS = 230.0                 # measured DRAM read on GB10 (MODEL.md)
STEP_B = (1, 2, 4, 8, 16, 32)
CHAIN_T = (1, 2, 4, 8, 16)
TREE_N = (8, 16, 32, 64)
COMMIT_B = (1, 8)
ROUND_T = (4, 16)
QUICK = dict(step=(1, 8), chain=(4, 16), tree=(32,), commit=(1, 8), round=(16,))


def _act_bytes(b: int, t: int, with_q: bool = True) -> int:
    qk = (2 if with_q else 1) * b * t * HQK * DK * ES
    return qk + b * t * HV * DV * ES + b * t * HV * (4 + ES)  # + v, g (fp32), beta


def _tokens(b: int, t: int):
    g = torch.Generator(device="cuda").manual_seed(b * 100 + t)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    q, k = r(b, t, HQK, DK).to(DTYPE), r(b, t, HQK, DK).to(DTYPE)
    v = r(b, t, HV, DV).to(DTYPE)
    g_ = -torch.rand(b, t, HV, device="cuda", generator=g) * 0.5
    beta = torch.sigmoid(r(b, t, HV)).to(DTYPE)
    return q, k, v, g_, beta


def _pool(b: int):
    return torch.randn(b, HV, DK, DV, device="cuda") * 0.05


def tree_parents(n: int, depth: int = 8) -> list[int]:
    """Parents (depth-first pre-order) of an n-node draft tree of the given depth: a spine of `depth`
    nodes (the likely path) with the other nodes hung beside it as alternatives, leaves and 2-node
    branches spread over the depths; at every node the alternatives are visited before the spine,
    so going down the spine needs the state of an ancestor again (the kernel's rebuilds)."""
    kids: dict[int, list[int]] = {-1: []}
    spine, count = [], 0

    def new(parent):
        nonlocal count
        kids.setdefault(parent, []).append(count)
        kids[count] = []
        count += 1
        return count - 1

    for d in range(depth):  # the spine first (its children lists end with the spine child)
        spine.append(new(spine[-1] if spine else -1))
    alt = n - depth
    d = 0
    while alt > 0:  # alternatives: siblings of spine node d (children of its parent)
        parent = spine[d - 1] if d > 0 else -1
        node = new(parent)
        alt -= 1
        if alt > 0 and d + 1 < depth and count % 3 == 0:
            new(node)
            alt -= 1
        d = (d + 1) % depth
    order, parents, label = [], {}, {}

    def visit(node, parent):
        label[node] = len(order)
        order.append(node)
        parents[node] = parent
        spine_child = [c for c in kids[node] if c in spine]
        for c in [c for c in kids[node] if c not in spine] + spine_child:
            visit(c, node)

    for c in [c for c in kids[-1] if c not in spine] + [c for c in kids[-1] if c in spine]:
        visit(c, -1)
    return [-1 if parents[x] < 0 else label[parents[x]] for x in order]


def _fla():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    except Exception:  # absent, or a build that does not import here
        return None
    return fused_recurrent_gated_delta_rule


@dataclass
class Case:
    op: str
    shape: str
    m: int
    make: Callable[[int], tuple]     # copy i -> args
    bytes: int                        # read + written by one call
    touched: int                      # bytes of one copy (decides the number of copies)
    providers: dict[str, Callable]


def _no_pdl(fn):
    return bench.with_knobs(fn, QWEN38_PDL="0")


def _copy_limit():
    """(prep, call) of the step's "limit: copy of the same bytes": the pool of each rotating copy
    copied into a destination of its size (prep allocates it outside the timing)."""
    def prep(q, k, v, g, beta, pool, slots):
        return pool, torch.empty_like(pool)

    return prep, lambda src, dst: bench.copy_bytes(dst, src)


def _fla_provider(fla, final_state: bool):
    """fla on [B, T, 48, 128] q/k (repeated from 16 heads outside the timing), l2 norm in its kernel,
    initial_state = our pool (fla's [N, HV, K, V] layout is ours)."""
    def call(q, k, v, g, beta, pool):
        o, _ = fla(q, k, v, g, beta, scale=DK ** -0.5, initial_state=pool, output_final_state=final_state,
                   use_qk_l2norm_in_kernel=True)
        return o
    return call


def _fla_args(q, k, v, g, beta, pool, *rest):
    """Our arguments -> fla's: a token dim for the step ([B, 1, ...]), q/k repeated to 48 heads."""
    if q.dim() == 3:
        q, k, v, g, beta = q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None]
    rep = HV // HQK
    return (q.repeat_interleave(rep, 2).contiguous(), k.repeat_interleave(rep, 2).contiguous(),
            v.contiguous(), g.contiguous(), beta.contiguous(), pool)


def cases(quick: bool) -> list[Case]:
    sel = QUICK if quick else dict(step=STEP_B, chain=CHAIN_T, tree=TREE_N, commit=COMMIT_B, round=ROUND_T)
    fla = _fla()
    out = []
    for b in sel["step"]:
        def make(i, b=b):
            q, k, v, g, beta = _tokens(b, 1)
            return (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], _pool(b),
                    torch.arange(b, device="cuda", dtype=torch.int32))
        step = lambda q, k, v, g, beta, pool, s: OPS.gdn_step(q, k, v, g, beta, pool, s)  # noqa: E731
        prov = {"qwen38": step, "qwen38 PDL off": _no_pdl(step), "limit: copy of the same bytes": _copy_limit()}
        if fla is not None:
            prov["fla"] = _fla_provider(fla, True)  # the step's new state is written
        nbytes = 2 * b * STATE + _act_bytes(b, 1) + b * HV * DV * ES
        out.append(Case("gdn_step", "B sequences x 1 token", b, make, nbytes, b * STATE + _act_bytes(b, 1), prov))
    for t in sel["chain"]:
        def make(i, t=t):
            return (*_tokens(1, t), _pool(1), torch.zeros(1, device="cuda", dtype=torch.int32))
        chain = lambda q, k, v, g, beta, pool, s: OPS.gdn_chain_verify(q, k, v, g, beta, pool, s)  # noqa: E731
        prov = {"qwen38": chain, "qwen38 PDL off": _no_pdl(chain)}
        if fla is not None:
            prov["fla"] = _fla_provider(fla, False)  # a verify writes no state
        nbytes = STATE + _act_bytes(1, t) + t * HV * DV * ES
        out.append(Case("gdn_chain_verify", "1 sequence x T tokens", t, make, nbytes, STATE + _act_bytes(1, t), prov))
    for n in sel["tree"]:
        par = torch.tensor([tree_parents(n)], device="cuda", dtype=torch.int32)

        def make(i, n=n, par=par):
            return (*_tokens(1, n), _pool(1), torch.zeros(1, device="cuda", dtype=torch.int32), par)
        tree = lambda q, k, v, g, beta, pool, s, p: OPS.gdn_tree_verify(q, k, v, g, beta, pool, s, p)  # noqa: E731
        nbytes = STATE + _act_bytes(1, n) + n * HV * DV * ES
        out.append(Case("gdn_tree_verify", "1 sequence x N nodes, depth 8", n, make, nbytes,
                        STATE + _act_bytes(1, n), {"qwen38": tree, "qwen38 PDL off": _no_pdl(tree),
                                                   "qwen38 unsplit": bench.with_knobs(tree, QWEN38_GDN_TREE_SPLIT="1")}))
    for b in sel["commit"]:
        def make(i, b=b):
            q, k, v, g, beta = _tokens(b, 8)
            return (k, v, g, beta, _pool(b), torch.arange(b, device="cuda", dtype=torch.int32),
                    torch.full((b,), 8, device="cuda", dtype=torch.int32))
        commit = lambda k, v, g, beta, pool, s, a: OPS.gdn_commit(k, v, g, beta, pool, s, a)  # noqa: E731
        nbytes = 2 * b * STATE + _act_bytes(b, 8, with_q=False)
        out.append(Case("gdn_commit", "B sequences x 8 accepted tokens", b, make, nbytes,
                        b * STATE + _act_bytes(b, 8, with_q=False), {"qwen38": commit, "qwen38 PDL off": _no_pdl(commit)}))
    for t in sel["round"]:
        def make(i, t=t):
            _, ck, cv_, cg, cbeta = _tokens(1, 8)
            return (ck, cv_, cg, cbeta, torch.full((1,), 8, device="cuda", dtype=torch.int32), *_tokens(1, t),
                    _pool(1), torch.zeros(1, device="cuda", dtype=torch.int32))

        def fused(ck, cv_, cg, cbeta, acc, q, k, v, g, beta, pool, s):
            return q38.gdn_commit_verify(ck, cv_, cg, cbeta, acc, None, q, k, v, g, beta, pool, s)

        def separate(*args):
            with knobs.override(QWEN38_COMMIT_IN_VERIFY="0"):
                return fused(*args)
        nbytes = 2 * STATE + _act_bytes(1, 8, with_q=False) + _act_bytes(1, t) + t * HV * DV * ES
        out.append(Case("gdn_commit_verify", "1 sequence: commit 8 + chain verify T", t, make, nbytes,
                        STATE + _act_bytes(1, 8, with_q=False) + _act_bytes(1, t),
                        {"qwen38": fused, "qwen38 commit + verify": separate}))
    return out


def _round_summary(records: list[bench.Record]) -> dict:
    """Per-round GDN time for Qwen3.8-27B at B = 1: 48 x (16-token chain verify + 8-token commit)."""
    def us(op, m):
        r = [x for x in records if x.op == op and x.M == m and x.provider == "qwen38"]
        return r[0].us if r else None
    v, c = us("gdn_chain_verify", 16), us("gdn_commit", 1)
    if v is None or c is None:
        return {}
    state_bytes = GDN_LAYERS * (STATE + 2 * STATE)  # verify reads; commit reads + writes
    fused = us("gdn_commit_verify", 16)
    extra = {} if fused is None else {
        "round_H200_us_commit_in_verify": round(GDN_LAYERS * fused, 1),
        "round_state_bytes_commit_in_verify": GDN_LAYERS * 2 * STATE,
        "round_GB10_projection_us_commit_in_verify": round(GDN_LAYERS * 2 * STATE / GB10_GBPS / 1e3, 1),
    }
    return {**extra,
        "round_H200_us": round(GDN_LAYERS * (v + c), 1),
        "round_state_bytes": state_bytes,
        "round_GB10_projection_us": round(state_bytes / GB10_GBPS / 1e3, 1),
        "round_GB10_projection_note": f"state bytes only, at {GB10_GBPS:.0f} GB/s (a projection, not a measurement)",
    }


def _plot_time(records: list[bench.Record], path: Path) -> None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return
    panels = bench._unique((r.op, r.shape) for r in records)
    fig = Figure(figsize=(5.5 * len(panels), 4.0), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False).ravel()
    for ax, (op, shape) in zip(axes, panels):
        rs = [r for r in records if (r.op, r.shape) == (op, shape)]
        for i, prov in enumerate(bench._unique(r.provider for r in rs)):
            pts = sorted((r.M, r.us) for r in rs if r.provider == prov)
            ax.plot(*zip(*pts), marker="o", markersize=3, label=prov, color=f"C{i}")
        ax.set(title=f"{op}\n{shape}", xlabel="M (sequences, tokens or nodes)", ylabel="us")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)


def run(quick: bool = False, ceiling: float | None = None, out_dir: Path | None = None):
    meta: dict = {}
    if ceiling is None:
        ceiling = bench.measure_read_ceiling()
    meta["ceiling_GBps"] = round(float(ceiling), 1)
    meta["ceiling_method"] = getattr(ceiling, "method", "given by the caller")
    meta["fla"] = "absent" if _fla() is None else "present"
    records, failures = [], []
    torch.manual_seed(0)
    with knobs.override(QWEN38_GDN_CHECK_INDICES="0"):  # eager warm-up calls: no host copies
        for case in bench.progress(cases(quick), "bench_gdn"):
            base = bench.rotating_copies(case.make, case.touched)
            for provider, fn in case.providers.items():
                if isinstance(fn, tuple):  # (prep, call): the call's arguments made from each copy's
                    prep, fn = fn
                    args = [prep(*a) for a in base]
                else:
                    args = [(_fla_args(*a) if provider == "fla" else a) for a in base]
                try:
                    us = bench.time_calls(fn, args)
                except Exception as e:  # one broken peer must not lose the rest of the sweep
                    failures.append(f"{case.op} M={case.m} {provider}: {type(e).__name__}: {e}")
                    print(f"\nFAILED {failures[-1]}", file=sys.stderr)
                    continue
                records.append(bench.Record.from_timing(case.op, provider, case.shape, None, None, case.m, us,
                                                        case.bytes, ceiling, note=f"{len(base)} rotating copies"))
            del base
    meta.update(_round_summary(records))
    if failures:
        meta["failures"] = failures
    if out_dir is not None:
        _plot_time(records, Path(out_dir) / "gdn_time.png")
    return records, meta


def main(argv: list[str] | None = None) -> int:
    results_root = Path(__file__).resolve().parent / "results"
    out_dir = results_root / bench.gpu_name() if torch.cuda.is_available() else None
    if argv is None:
        argv = sys.argv[1:]
    if "--out" in argv:
        out_dir = Path(argv[argv.index("--out") + 1])
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    return bench.bench_main("gdn", lambda quick: run(quick=quick, out_dir=out_dir),
                            description=__doc__.split("\n\n")[0],
                            quick_help="step B 1, 8; chain T 4, 16; tree 32 nodes; commit B 1, 8; round T 16",
                            results_root=results_root, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
