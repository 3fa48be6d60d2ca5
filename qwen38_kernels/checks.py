"""The per-op checks behind ``qwen38_kernels.check()`` and ``python -m qwen38_kernels``.

Each check compares an op with its reference on random data at the Qwen3.8-27B shapes and returns
a ``CheckResult``. GPU checks run the CUDA kernel against the float64 evaluation of the reference
(rounded at the reference's rounding points) and test row invariance; CPU checks run the CPU path
(the float32 reference) against the same float64 evaluation. Later op families add their checks
here with ``@register``.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import reference as ref
from .testing import ulp_diff


@dataclass
class CheckResult:
    name: str
    device: str
    ok: bool
    detail: str
    max_ulp: float | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


# (name, device, fn): device "cuda" checks run only with a GPU, "cpu" checks everywhere
CHECKS: list[tuple[str, str, Callable[[], CheckResult]]] = []


def register(name: str, device: str):
    def deco(fn):
        CHECKS.append((name, device, fn))
        return fn
    return deco


def run_all(devices: tuple[str, ...]) -> list[CheckResult]:
    results = []
    for name, dev, fn in CHECKS:
        if dev not in devices:
            continue
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception as e:  # a crash is a FAIL with its reason, not the end of the report
            r = CheckResult(name, dev, False, f"raised {type(e).__name__}: {e}",
                            extra={"traceback": traceback.format_exc()})
        r.seconds = time.perf_counter() - t0
        results.append(r)
    return results


# ---- norm family --------------------------------------------------------------------------------
_gen = torch.Generator().manual_seed(20261129)


def _randn(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape, generator=_gen) * scale).to(dtype)


def _norm_cases():
    """(name, fn_name, args on CPU) at the model's shapes: layer norms, q/k norms, the GDN norm."""
    cases = []
    for m in (1, 32):
        x = _randn(m, 5120, scale=3.0)
        w = _randn(5120, scale=0.1)
        cases.append((f"rms_norm {m}x5120 zc", "rms_norm", (x, w, 1e-6, True)))
        cases.append((f"add_rms_norm {m}x5120", "add_rms_norm", (x, _randn(m, 5120), w, 1e-6, True)))
        q = _randn(m, 24, 256)
        cases.append((f"rms_norm {m}x24x256 (q_norm)", "rms_norm", (q, _randn(256, scale=0.1), 1e-6, True)))
        o = _randn(m, 48, 128)
        cases.append((f"rms_norm_gated {m}x48x128", "rms_norm_gated",
                      (o, _randn(m, 48, 128, scale=2.0), 1.0 + _randn(128, scale=0.1), 1e-6)))
        cases.append((f"rms_norm_gated {m}x48x128 w=fp32", "rms_norm_gated",
                      (o, _randn(m, 48, 128), _randn(128, dtype=torch.float32), 1e-6)))
        cases.append((f"silu_mul {m}x(2x17408)", "silu_mul", (_randn(m, 2 * 17408, scale=3.0),)))
    return cases


def _first(out):
    return out if isinstance(out, torch.Tensor) else out[0]


def _max_ulp(outs, exact) -> int:
    outs = outs if isinstance(outs, tuple) else (outs,)
    exact = exact if isinstance(exact, tuple) else (exact,)
    return max(int(ulp_diff(a.cpu(), b.cpu()).max()) for a, b in zip(outs, exact))


def _norm_check(device: str) -> CheckResult:
    worst, lines, ok = 0, [], True
    cases = _norm_cases()
    for label, fname, args in cases:
        dev_args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
        out = getattr(torch.ops.qwen38, fname)(*dev_args)
        if fname in ("rms_norm_gated", "silu_mul"):  # an intermediate rounding: either side of a tie is legal
            lo, hi = getattr(ref, f"{fname}_f64_branches")(*args)
            u = int(torch.minimum(ulp_diff(out.cpu(), lo), ulp_diff(out.cpu(), hi)).max())
        else:
            u = _max_ulp(out, getattr(ref, fname)(*args, acc_dtype=torch.float64))
        worst = max(worst, u)
        if u > 1:
            ok = False
            lines.append(f"{label}: {u} ulp")
        if device == "cuda":  # row invariance: each row of a multi-row call == its 1-row call
            m = args[0].shape[0]
            if m > 1:
                full = _first(out)
                for r in (0, m // 2, m - 1):
                    one = _first(getattr(torch.ops.qwen38, fname)(
                        *(a[r:r + 1] if isinstance(a, torch.Tensor) and a.dim() > 1 else a for a in dev_args)))
                    if not torch.equal(one.view(torch.int16), full[r:r + 1].view(torch.int16)):
                        ok = False
                        lines.append(f"{label}: row {r} differs from its 1-row call")
    detail = f"{len(cases)} cases, max {worst} ulp vs float64" + ("; " + "; ".join(lines) if lines else "")
    return CheckResult("norm", device, ok, detail, max_ulp=worst)


@register("norm (rms_norm, add_rms_norm, rms_norm_gated, silu_mul)", "cuda")
def _norm_cuda():
    return _norm_check("cuda")


@register("norm CPU path (references)", "cpu")
def _norm_cpu():
    return _norm_check("cpu")


# ---- gemm family ---------------------------------------------------------------------------------
_GEMM_SHAPES = ((1024, 5120), (48, 5120), (5120, 6144))


def _weight_gemm_check(name: str, device: str, quantize, op, bound) -> CheckResult:
    """A weight GEMM at model shapes, 1 and 32 rows: within ``bound`` of the float64 evaluation (the
    fp32 accumulation bound plus one bf16 ulp) and, on CUDA, each row of the 32-row call equal to its
    1-row call. ``quantize(w_bf16)`` -> the op's weight arguments; ``bound(x, *weights)`` -> (y64, err)."""
    lines, ok, worst = [], True, 0.0
    for n, k in _GEMM_SHAPES:
        weights = quantize((torch.randn(n, k, generator=_gen) * 0.05).to(torch.bfloat16))
        for m in (1, 32):
            x = _randn(m, k)
            dev_args = tuple(a.to(device) for a in (x, *weights))
            y = op(*dev_args).cpu().to(torch.float64)
            y64, err = bound(x, *weights)
            excess = float(((y - y64).abs() / (err + y64.abs() * 2.0 ** -8).clamp_min(1e-30)).max())
            worst = max(worst, excess)
            if excess > 1.0:
                ok = False
                lines.append(f"{n}x{k} M={m}: error {excess:.2f}x the bound")
            if device == "cuda" and m > 1:
                full = op(*dev_args)
                for r in (0, m - 1):
                    one = op(dev_args[0][r:r + 1], *dev_args[1:])
                    if not torch.equal(one.view(torch.int16), full[r:r + 1].view(torch.int16)):
                        ok = False
                        lines.append(f"{n}x{k}: row {r} of {m} differs from its 1-row call")
    detail = (f"{2 * len(_GEMM_SHAPES)} cases, worst error {worst:.2f} of the bound"
              + ("; " + "; ".join(lines) if lines else ""))
    return CheckResult(name, device, ok, detail)


def _nvfp4_check(device: str) -> CheckResult:
    from . import formats

    def quantize(w):
        q = formats.quantize_nvfp4(w)
        return q.packed, q.scale, q.global_scale

    def bound(x, packed, scale, gs):
        wd = formats.dequantize_nvfp4(formats.NVFP4Weight(packed, scale, gs), torch.float64)
        y64 = ref.nvfp4_linear(x, packed, scale, gs, None, torch.float32, acc_dtype=torch.float64).to(torch.float64)
        return y64, x.shape[-1] * 2.0 ** -23 * (x.to(torch.float64).abs() @ wd.abs().t())

    return _weight_gemm_check("nvfp4_linear", device, quantize, torch.ops.qwen38.nvfp4_linear, bound)


def _fp8_check(device: str) -> CheckResult:
    from . import formats_fp8
    from .reference import fp8 as ref8

    def quantize(w):
        q = formats_fp8.quantize_fp8_block(w)
        return q.weight, q.weight_scale_inv

    return _weight_gemm_check("fp8_block_linear", device, quantize, torch.ops.qwen38.fp8_block_linear,
                              ref8.fp8_block_linear_f64_bound)


@register("nvfp4_linear (skinny, 1-32 rows)", "cuda")
def _nvfp4_cuda():
    return _nvfp4_check("cuda")


@register("nvfp4_linear CPU path (reference)", "cpu")
def _nvfp4_cpu():
    return _nvfp4_check("cpu")


def _prefill_strategies(knob: str, strategies: tuple[str, ...], call, bound, k: int,
                        lines: list[str]) -> tuple[bool, float]:
    """For each strategy (set through ``knob``) at 100 and 600 rows: ``call(x)`` within ``bound(x, y)``
    (its excess over the bound: |y - y64| / bound), and under "chunked" the last row equal to its
    1-row call. Appends what fails to ``lines``; returns (ok, worst excess)."""
    from . import knobs
    ok, worst = True, 0.0
    for strategy in strategies:
        for m in (100, 600):
            x = _randn(m, k).cuda()
            with knobs.override(**{knob: strategy}):
                y = call(x)
                one = call(x[m - 1:m].clone())
            excess = bound(x, y)
            worst = max(worst, excess)
            if excess > 1.0:
                ok = False
                lines.append(f"{strategy} M={m}: error {excess:.2f}x the bound")
            if strategy == "chunked" and not torch.equal(one.view(torch.int16), y[m - 1:m].view(torch.int16)):
                ok = False
                lines.append(f"chunked M={m}: row {m - 1} differs from its 1-row call")
    return ok, worst


@register("nvfp4_linear prefill (chunked and dequant, 100 and 600 rows), nvfp4_dequantize", "cuda")
def _nvfp4_prefill_cuda():
    """Both prefill strategies within the float64 bound of the reference (the criterion of
    reference.gemm.nvfp4_linear_f64_bound, bf16 output), each row of the chunked strategy equal to
    its 1-row call, and nvfp4_dequantize bit-exact against its reference."""
    from . import formats
    from .reference import gemm as refg

    lines: list[str] = []
    n, k = 1024, 5120
    q = formats.quantize_nvfp4((torch.randn(n, k, generator=_gen) * 0.05).to(torch.bfloat16).cuda())

    def bound(x, y):
        y64, err = refg.nvfp4_linear_f64_bound(x, q.packed, q.scale, q.global_scale)
        return float(((y.double() - y64).abs() / (err + y64.abs() * 2.0 ** -8).clamp_min(1e-30)).max())

    ok, worst = _prefill_strategies(
        "QWEN38_NVFP4_PREFILL", ("chunked", "dequant"),
        lambda x: torch.ops.qwen38.nvfp4_linear(x, q.packed, q.scale, q.global_scale), bound, k, lines)
    for dt in (torch.bfloat16, torch.float16):
        got = torch.ops.qwen38.nvfp4_dequantize(q.packed, q.scale, dt)
        want = refg.nvfp4_dequantize(q.packed.cpu(), q.scale.cpu(), dt).cuda()
        if not torch.equal(got.view(torch.int16), want.view(torch.int16)):
            ok = False
            lines.append(f"nvfp4_dequantize {dt}: not bit-exact")
    detail = f"{n}x{k}: worst error {worst:.2f} of the bound" + ("; " + "; ".join(lines) if lines else "")
    return CheckResult("nvfp4_linear prefill", "cuda", ok, detail)


@register("fp8_block_linear (skinny, 1-32 rows)", "cuda")
def _fp8_cuda():
    return _fp8_check("cuda")


@register("fp8_block_linear prefill (chunked and mma, 100 and 600 rows)", "cuda")
def _fp8_prefill_cuda():
    """Both prefill strategies within the float64 bound of the reference
    (reference.fp8.fp8_block_linear_f64_bound: |y - y64| <= spacing(y) / 2 + err), and each row of
    the chunked strategy equal to its 1-row call."""
    from . import formats_fp8
    from . import testing as qt
    from .reference import fp8 as ref8

    lines: list[str] = []
    n, k = 1000, 5120
    q = formats_fp8.quantize_fp8_block((torch.randn(n, k, generator=_gen) * 0.05).to(torch.bfloat16).cuda())

    def bound(x, y):
        y64, err = ref8.fp8_block_linear_f64_bound(x.cpu(), q.weight.cpu(), q.weight_scale_inv.cpu())
        return float(((y.cpu().double() - y64).abs() / (err + qt.rounding_slack(y.cpu())).clamp_min(1e-30)).max())

    ok, worst = _prefill_strategies(
        "QWEN38_FP8_PREFILL", ("chunked", "mma"),
        lambda x: torch.ops.qwen38.fp8_block_linear(x, q.weight, q.weight_scale_inv), bound, k, lines)
    detail = f"{n}x{k}: worst error {worst:.2f} of the bound" + ("; " + "; ".join(lines) if lines else "")
    return CheckResult("fp8_block_linear prefill", "cuda", ok, detail)


@register("fp8_block_linear CPU path (reference)", "cpu")
def _fp8_cpu():
    return _fp8_check("cpu")


# ---- output head ---------------------------------------------------------------------------------

def _head_check(device: str) -> CheckResult:
    """head_logits within the float64 bound on a 4096-row slice of the model's head (1 and 32 rows),
    head_argmax == argmax of head_logits; on CUDA each row of the 32-row call == its 1-row call."""
    from .reference import fp8 as ref8
    lines, ok = [], True
    w = _randn(4096, 5120, scale=0.02)
    for m in (1, 32):
        x = _randn(m, 5120)
        xd, wd = x.to(device), w.to(device)
        y = torch.ops.qwen38.head_logits(xd, wd)
        y64, err = ref8.head_logits_f64_bound(x, w)
        bad = int(((y.cpu().double() - y64).abs() > err).sum())
        if bad:
            ok = False
            lines.append(f"M={m}: {bad} logits outside the fp32 bound")
        idx, val = torch.ops.qwen38.head_argmax(xd, wd)
        if not torch.equal(idx.cpu(), y.cpu().argmax(-1)) or not torch.equal(
                val.cpu().view(torch.int32), y.cpu().gather(-1, idx.cpu()[:, None])[:, 0].view(torch.int32)):
            ok = False
            lines.append(f"M={m}: head_argmax differs from argmax(head_logits)")
        if device == "cuda" and m > 1:
            for r in (0, m - 1):
                one = torch.ops.qwen38.head_logits(xd[r:r + 1].clone(), wd)
                if not torch.equal(one.view(torch.int32), y[r:r + 1].view(torch.int32)):
                    ok = False
                    lines.append(f"row {r} of {m} differs from its 1-row call")
    return CheckResult("head", device, ok, "4096x5120, M 1 and 32" + ("; " + "; ".join(lines) if lines else ""))


@register("head_logits, head_argmax (1-32 rows)", "cuda")
def _head_cuda():
    return _head_check("cuda")


@register("head_logits, head_argmax CPU path (references)", "cpu")
def _head_cpu():
    return _head_check("cpu")


# ---- causal conv1d ----------------------------------------------------------------------------------

def _conv_check(device: str) -> CheckResult:
    """conv_step / conv_chain / conv_tree / conv_commit on CUDA == the CPU references bit for bit
    (C = 10240, 2 sequences, a 7-node tree); on the CPU: within 1 ulp of the float64 evaluation."""
    from .reference import gdn
    c, lines = gdn.CONV_CHANNELS, []
    x = _randn(2, 7, c, scale=2.0)
    cs = _randn(4, c, 3, scale=2.0)
    w = _randn(c, 4, scale=0.5)
    slots = torch.tensor([3, 1])
    parents = torch.tensor([[-1, 0, 1, 1, -1, 4, 5], [-1, 0, 0, 2, 3, 3, -1]])
    dev = lambda *ts: tuple(t.to(device) for t in ts)  # noqa: E731
    ops = torch.ops.qwen38
    pairs = [
        ("conv_chain", ops.conv_chain(*dev(x, cs, w, slots)), gdn.conv_chain(x, cs, w, slots)),
        ("conv_tree", ops.conv_tree(*dev(x, cs, w, slots, parents)), gdn.conv_tree(x, cs, w, slots, parents)),
    ]
    st_dev, st_ref = cs.clone().to(device), cs.clone()
    pairs.append(("conv_step", ops.conv_step(*dev(x[:, 0]), st_dev, *dev(w, slots)),
                  gdn.conv_step(x[:, 0], st_ref, w, slots)))
    pairs.append(("conv_step state", st_dev, st_ref))
    ops.conv_commit(*dev(x), st_dev, *dev(slots, torch.tensor([3, 5]), parents))
    gdn.conv_commit(x, st_ref, slots, torch.tensor([3, 5]), parents)
    pairs.append(("conv_commit state", st_dev, st_ref))
    if device == "cpu":  # the CPU kernels ARE the references: measure them against float64 instead
        pairs = [("conv_chain", pairs[0][1], gdn.conv_chain(x, cs, w, slots, acc_dtype=torch.float64)),
                 ("conv_tree", pairs[1][1], gdn.conv_tree(x, cs, w, slots, parents, acc_dtype=torch.float64))]
        worst = max(int(ulp_diff(got, want).max()) for _, got, want in pairs)
        ok = worst <= 1
        return CheckResult("conv", device, ok, f"C=10240, chain/tree max {worst} ulp vs float64", max_ulp=worst)
    for name, got, want in pairs:
        if not torch.equal(got.cpu().view(torch.int16), want.view(torch.int16)):
            lines.append(f"{name} differs from the reference")
    return CheckResult("conv", device, not lines, "C=10240, step/chain/tree/commit bit for bit vs the reference"
                       + ("; " + "; ".join(lines) if lines else ""))


@register("conv_step, conv_chain, conv_tree, conv_commit", "cuda")
def _conv_cuda():
    return _conv_check("cuda")


@register("conv CPU path (references)", "cpu")
def _conv_cpu():
    return _conv_check("cpu")


@register("tile tables", "cpu")
def _tables():
    from . import tables
    found = tables.find_tables()
    for (arch, op) in found:
        tables.load(arch, op)  # validates; raises TableError
    return CheckResult("tile tables", "cpu", True, f"{len(found)} tables valid")


# ---- gdn family ----------------------------------------------------------------------------------
def _gdn_inputs(batch: int, t: int, device: str):
    """Tokens [B, T, ...] with HF-range gates, a pool of B + 1 random states, on `device`."""
    from .reference import gdn
    g0 = torch.Generator().manual_seed(20261130 + batch * 64 + t)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g0) * sc)  # noqa: E731
    q, k = r(batch, t, 16, 128).to(torch.bfloat16), r(batch, t, 16, 128).to(torch.bfloat16)
    v = r(batch, t, 48, 128).to(torch.bfloat16)
    A_log = torch.log(torch.rand(48, generator=g0) * 15 + 1)
    dt_bias = torch.log(torch.expm1(torch.rand(48, generator=g0) * 0.1 + 1e-3))
    g, beta = gdn.gdn_gates(r(batch, t, 48).to(torch.bfloat16), r(batch, t, 48).to(torch.bfloat16), A_log, dt_bias)
    pool = r(batch + 1, 48, 128, 128, sc=0.05)
    return tuple(x.to(device) for x in (q, k, v, g, beta, pool))


def _gdn_check(device: str) -> CheckResult:
    """CUDA: every op bit for bit equal to the fp32 reference (outputs and states), and verify ==
    stepping. CPU: the fp32 reference (the CPU kernels) against its float64 evaluation over 16
    steps (bf16 outputs: 1-ulp rate; state relative RMS error)."""
    ops = torch.ops.qwen38
    lines, ok = [], True
    if device == "cuda":
        q, k, v, g, beta, pool = _gdn_inputs(2, 16, "cpu")
        slots = torch.tensor([2, 0])
        par = torch.tensor([[-1, 0, 1, 1, 3, -1, 5, 6, 6, 5, 9, 10, 11, 12, 12, 9]] * 2)
        acc_tree, acc_chain = torch.tensor([8, 14]), torch.tensor([16, 5])
        cases = [
            ("gdn_step", (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], pool, slots)),
            ("gdn_chain_verify", (q, k, v, g, beta, pool, slots, torch.tensor([16, 7]))),
            ("gdn_tree_verify", (q, k, v, g, beta, pool, slots, par)),
            ("gdn_commit", (k, v, g, beta, pool, slots, acc_chain, None)),
            ("gdn_commit", (k, v, g, beta, pool, slots, acc_tree, par)),
        ]
        for name, args in cases:
            cpu = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            gpu = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
            want, got = getattr(ops, name)(*cpu), getattr(ops, name)(*gpu)
            pi = 5 if name != "gdn_commit" else 4
            same = torch.equal(gpu[pi].cpu().view(torch.int32), cpu[pi].view(torch.int32))
            if want is not None:
                same = same and torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))
            if not same:
                ok = False
                lines.append(f"{name}: CUDA differs from the reference")
        detail = f"{len(cases)} cases bit-identical to the fp32 reference" if ok else "; ".join(lines)
        return CheckResult("gdn", device, ok, detail)
    steps = 16
    q, k, v, g, beta, pool = _gdn_inputs(1, steps, "cpu")
    p32, p64 = pool[:1].clone(), pool[:1].to(torch.float64)
    slots = torch.tensor([0])
    ulps = []
    for t in range(steps):
        args = (q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        o32 = ops.gdn_step(*args, p32, slots)
        o64 = ref.gdn_step(*args, p64, slots, acc_dtype=torch.float64)
        ulps.append(ulp_diff(o32, o64).flatten())
    u = torch.cat(ulps)
    rate = float((u == 1).double().mean())
    rel = float(torch.sqrt(((p32.double() - p64) ** 2).mean() / (p64 ** 2).mean()))
    ok = rel < 1e-5 and rate < 2e-3
    return CheckResult("gdn", device, ok, f"{steps} steps vs float64: bf16 1-ulp rate {rate:.1e}, max "
                       f"{int(u.max())} ulp; state relative RMS error {rel:.1e}", max_ulp=int(u.max()))


@register("gdn (step, chain/tree verify, commit)", "cuda")
def _gdn_cuda():
    return _gdn_check("cuda")


@register("gdn CPU path (references)", "cpu")
def _gdn_cpu():
    return _gdn_check("cpu")


# ---- attn family ---------------------------------------------------------------------------------
def _attn_check(device: str) -> CheckResult:
    """attn_decode at the model's geometry (24 q / 4 kv heads of 256): a 16-row chain and a 9-node tree
    after a 300-key prefix within the float64 bound, and every tree node bit-equal to its one-token
    call on the cache its accepted path would leave."""
    from .reference import attn as ref
    lines = []
    prefix, t = 300, 16
    q = _randn(1, t, 24, 256).to(device)
    k, v = _randn(1, 4, prefix + t, 256).to(device), _randn(1, 4, prefix + t, 256).to(device)
    kl = torch.tensor([prefix + t], device=device)
    rows = ref.tree_mask([-1, 0, 1, 0, 3, 4, -1, 6, 7] + list(range(8, 15)))  # row i sees its ancestors
    mask = rows[None].to(device)
    worst = 0.0
    for name, m in (("chain", None), ("tree", mask)):
        o = torch.ops.qwen38.attn_decode(q, k, v, kl, m)
        o64, bound = ref.attn_decode_f64_bound(q.cpu(), k.cpu(), v.cpu(), kl.cpu(), None if m is None else m.cpu())
        excess = float(((o.cpu().double() - o64).abs() / bound).max())
        worst = max(worst, excess)
        if excess > 1:
            lines.append(f"{name}: outside the float64 bound ({excess:.2f} of it)")
        if m is None:
            continue
        for i in (2, 5, 15):  # the cache the accept of node i leaves: the prefix, then its path
            keep = torch.tensor(list(range(prefix)) + (prefix + rows[i].nonzero().flatten()).tolist(), device=device)
            one = torch.ops.qwen38.attn_decode(q[:, i:i + 1], k.index_select(2, keep), v.index_select(2, keep),
                                               torch.tensor([keep.numel()], device=device))
            if not torch.equal(one[:, 0].view(torch.int16), o[:, i].view(torch.int16)):
                lines.append(f"tree node {i} differs from its one-token call")
    return CheckResult("attn", device, not lines, f"24/4 heads of 256, prefix {prefix}, chain 16 / tree 16: worst "
                       f"{worst:.2f} of the float64 bound; tree nodes == one-token calls"
                       + ("; " + "; ".join(lines) if lines else ""))


@register("attn_decode (chain, tree == one-token calls)", "cuda")
def _attn_cuda():
    return _attn_check("cuda")


@register("attn_decode CPU path (reference)", "cpu")
def _attn_cpu():
    return _attn_check("cpu")
