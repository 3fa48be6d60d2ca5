"""Decode attention (torch.ops.qwen38.attn_decode): accuracy against a float64 evaluation that scores
every cache slot and masks (no gathering), and the exactness a verify needs: a chain row or tree node
bit-identical to the one-token call after its accepted path is compacted into the cache, a row's bits
independent of the other rows, of the batch, and of where its keys sit; padding rows and invisible
slots never read; opcheck and bad input. The CUDA kernel (csrc/attn) also: long caches (rows of many
splits, merged by the second kernel; longer splits past 16384 keys), graph == eager with index values
changed between replays, and its own guards (QWEN38_ATTN_CHECK_INDICES=0: index values not
read on the host). tests/test_attn_emulation.py runs the kernel source on the CPU."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import qwen38_kernels as q
from qwen38_kernels import knobs
from qwen38_kernels import testing as qt
from qwen38_kernels.reference import attn as ref

OPS = torch.ops.qwen38
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(autouse=True)
def _the_cuda_kernels():
    """Every CUDA case here runs the kernels (QWEN38_ATTN_KERNEL=1, the default, whatever the environment
    says; the CPU ignores the knob); test_cuda_knob_0_is_the_reference checks the other path."""
    with knobs.override(QWEN38_ATTN_KERNEL="1"):
        yield


def path_of(parents: list[int], i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def _inputs(b, t, hq, hkv, d, slots, seed, device="cpu", dt=torch.bfloat16, scale=1.0):
    qq = qt.randn_nonzero(b, t, hq, d, dtype=dt, seed=seed, scale=scale, device=device)
    k = qt.randn_nonzero(b, hkv, slots, d, dtype=dt, seed=seed + 1, scale=scale, device=device)
    v = qt.randn_nonzero(b, hkv, slots, d, dtype=dt, seed=seed + 2, device=device)
    return qq, k, v


def _idx(values, device):
    return torch.tensor(values, dtype=torch.int64, device=device)


def _check_f64(o, qq, k, v, kl, mask=None, lengths=None, scale=None):
    o64, bound = ref.attn_decode_f64_bound(qq.cpu(), k.cpu(), v.cpu(), kl.cpu(), None if mask is None else mask.cpu(),
                                           None if lengths is None else lengths.cpu(), scale=scale)
    err = (o.cpu().double() - o64).abs()
    bad = err > bound
    assert not bool(bad.any()), (f"{int(bad.sum())} of {bad.numel()} elements outside the f64 bound; worst "
                                 f"{float((err - bound).max()):.3g} at {tuple(int(i) for i in bad.nonzero()[0])}")
    return o64


# ---- accuracy -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("geom", [(24, 4, 256), (4, 1, 64), (16, 1, 128), (6, 2, 128)])
def test_accuracy_chain_and_padding(device, dt, geom):
    hq, hkv, d = geom
    qq, k, v = _inputs(3, 5, hq, hkv, d, 150, seed=11, device=device, dt=dt)
    kl, ls = _idx([150, 7, 70], device), _idx([5, 2, 0], device)
    o = q.attn_decode(qq, k, v, kl, None, ls)
    assert o.shape == qq.shape and o.dtype == dt and o.is_contiguous()
    _check_f64(o, qq, k, v, kl, None, ls)
    assert torch.equal(o[1, 2:].cpu(), torch.zeros_like(o[1, 2:].cpu())) and not bool(o[2].cpu().any())


@pytest.mark.parametrize("device", DEVICES)
def test_accuracy_cpu_tight(device):
    """The CPU kernel's fp32 evaluation is far inside the general bound: half an output unit plus 2^-16
    of the weighted |v| (a missed or extra key moves a row by about its weight, ~1/n of |v|)."""
    if device != "cpu":
        pytest.skip("the CUDA kernel rounds probabilities to bf16 for its tensor cores: the general bound")
    qq, k, v = _inputs(2, 9, 8, 2, 128, 300, seed=5, scale=2.0)
    kl = _idx([300, 40], "cpu")
    mask = torch.stack([ref.tree_mask([-1, 0, 1, 1, -1, 4, 5, 4, 7]), ref.tree_mask([-1, 0, 0, 2, 3, -1, 5, 6, 6])])
    o = q.attn_decode(qq, k, v, kl, mask)
    o64, _ = ref.attn_decode_f64_bound(qq, k, v, kl, mask)
    wabs = ref.attn_decode_f64_bound(qq, k, v.abs(), kl, mask)[0]
    assert bool(((o.double() - o64).abs() <= 2.0 ** -8 * o64.abs() + 2.0 ** -16 * wabs).all())


# ---- exactness: verify == one-token decode ---------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prefix", [0, 1, 63, 64, 200])
def test_chain_row_is_the_one_token_call(device, prefix):
    t, hq, hkv, d = 16, 24, 4, 256
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t + 5, seed=prefix, device=device)
    o = q.attn_decode(qq, k, v, _idx([prefix + t], device))
    _check_f64(o, qq, k, v, _idx([prefix + t], device))
    for r in range(t):
        one = q.attn_decode(qq[:, r:r + 1], k, v, _idx([prefix + r + 1], device))
        qt.assert_bitwise_equal(o[:, r], one[:, 0], f"chain row {r} after a prefix of {prefix}")


@settings(deadline=None)
@given(parents=qt.dfs_trees(max_nodes=64), prefix=st.sampled_from([0, 3, 64, 130]), data=st.data())
def test_tree_node_is_the_one_token_call_after_compaction(parents, prefix, data):
    """Node i of a tree verify == one token at the end of a cache holding the prefix and then node i's
    path (what the accept leaves), bit for bit; with spare slots after the keys holding NaN."""
    device = data.draw(st.sampled_from(["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]))
    t, hq, hkv, d = len(parents), 12, 2, 64
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t + 3, seed=t + prefix, device=device)
    k[:, :, prefix + t:], v[:, :, prefix + t:] = float("nan"), float("nan")
    mask = ref.tree_mask(parents)[None].to(device)
    o = q.attn_decode(qq, k, v, _idx([prefix + t], device), mask)
    for i in sorted(set(data.draw(st.lists(st.integers(0, t - 1), min_size=1, max_size=6)))):
        keep = _idx(list(range(prefix)) + [prefix + j for j in path_of(parents, i)], device)
        kc, vc = k.index_select(2, keep), v.index_select(2, keep)
        one = q.attn_decode(qq[:, i:i + 1], kc, vc, _idx([keep.numel()], device))
        qt.assert_bitwise_equal(o[:, i], one[:, 0], f"tree node {i} (parents {parents})")


@pytest.mark.parametrize("device", DEVICES)
def test_rows_independent_of_batch_position_and_slot_placement(device):
    """Sequence i of a batch == the same sequence alone; the same visible keys later in a longer cache
    (NaN in the slots no row sees) give the same bits; each row == its own one-row call."""
    hq, hkv, d, t = 6, 1, 128, 7
    parents = [[-1, 0, 1, 0, 3, -1, 5], [-1, 0, 0, 2, 2, 4, 2], [-1, 0, 1, 2, 3, 4, 5]]
    qq, k, v = _inputs(3, t, hq, hkv, d, 90, seed=3, device=device)
    kl, ls = _idx([90, 30, 11], device), _idx([7, 5, 4], device)
    for i in range(3):  # poison what no row reads: slots past kv_lens, padding rows' queries
        k[i, :, int(kl[i]):], v[i, :, int(kl[i]):] = float("nan"), float("nan")
        qq[i, int(ls[i]):] = float("nan")
    mask = torch.stack([ref.tree_mask(p) for p in parents]).to(device)
    o = q.attn_decode(qq, k, v, kl, mask, ls)
    _check_f64(o, qq, k, v, kl, mask, ls)
    for i in range(3):
        alone = q.attn_decode(qq[i:i + 1], k[i:i + 1], v[i:i + 1], kl[i:i + 1], mask[i:i + 1], ls[i:i + 1])
        qt.assert_bitwise_equal(o[i:i + 1], alone, f"sequence {i} alone")
        shift = 17  # the same keys 17 slots later, garbage before them
        k2 = torch.full((1, hkv, 90 + shift, d), float("nan"), dtype=k.dtype, device=device)
        v2 = k2.clone()
        n = int(kl[i]) - int(ls[i])
        k2[:, :, :n], v2[:, :, :n] = k[i:i + 1, :, :n], v[i:i + 1, :, :n]
        m = int(ls[i])
        dst = slice(n + shift, n + shift + m)
        k2[:, :, dst], v2[:, :, dst] = k[i:i + 1, :, n:n + m], v[i:i + 1, :, n:n + m]
        for r in range(m):
            rows = [j for j in range(m) if bool(mask[i, r, j])]
            keep = _idx(list(range(n)) + [n + shift + j for j in rows], device)
            one = q.attn_decode(qq[i:i + 1, r:r + 1], k2.index_select(2, keep), v2.index_select(2, keep),
                                _idx([keep.numel()], device))
            qt.assert_bitwise_equal(o[i, r], one[0, 0], f"sequence {i} row {r}")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic(device):
    qq, k, v = _inputs(2, 4, 8, 2, 64, 50, seed=9, device=device)
    qt.assert_deterministic(q.attn_decode, qq, k, v, _idx([50, 9], device))


# ---- opcheck, fake, bad input ---------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    qq, k, v = _inputs(2, 3, 4, 2, 64, 12, seed=1, device=device)
    kl = _idx([12, 5], device)
    mask = torch.stack([ref.tree_mask([-1, 0, -1]), ref.tree_mask([-1, 0, 1])]).to(device)
    qt.run_opcheck(OPS.attn_decode.default, (qq, k, v, kl, None, None))
    qt.run_opcheck(OPS.attn_decode.default, (qq, k, v, kl, mask, _idx([3, 2], device)), {"scale": 0.25})
    if device == "cuda":
        qt.run_opcheck(OPS._attn_decode_kernel.default, (qq, k, v, kl, mask, _idx([3, 2], device)))


def test_fake_shapes_under_compile():
    qq, k, v = _inputs(1, 2, 4, 1, 64, 6, seed=2)
    kl = _idx([6], "cpu")

    @torch.compile(fullgraph=True, backend="eager")
    def f(a, b, c, d):
        return q.attn_decode(a, b, c, d) * 2

    qt.assert_bitwise_equal(f(qq, k, v, kl), q.attn_decode(qq, k, v, kl) * 2, "compiled")


def _bad_cases():
    qq, k, v = _inputs(2, 3, 4, 2, 64, 8, seed=4)
    kl = _idx([8, 5], "cpu")
    eye = torch.eye(3, dtype=torch.bool).expand(2, 3, 3).clone()
    late = eye.clone()
    late[0, 0, 2] = True
    blind = eye.clone()
    blind[1, 1, 1] = False
    return [
        ("q", (qq.float(), k, v, kl), {}, "q must be bfloat16 or float16"),
        ("q", (qq[0], k, v, kl), {}, "q must have shape [B, T, Hq, D]"),
        ("q", (torch.zeros(2, 65, 4, 64, dtype=torch.bfloat16), k, v, kl), {}, "at most 64"),
        ("q", (qq[..., :32].contiguous(), k[..., :32].contiguous(), v[..., :32].contiguous(), kl), {},
         "must be 64, 128 or 256"),
        ("q", (qq.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, kl), {}, "q must be contiguous in its last"),
        ("k_cache", (qq, k.half(), v, kl), {}, "k_cache must have q's dtype"),
        ("v_cache", (qq, k, v[:, :, :5], kl), {}, "v_cache must have k_cache's shape"),
        ("k_cache", (qq, k[:1], v[:1], kl), {}, "k_cache must have shape [2, Hkv, L, 64]"),
        ("k_cache", (qq, torch.cat([k, k[:, :1]], 1), torch.cat([v, v[:, :1]], 1), kl), {}, "multiple of k_cache's 3"),
        ("kv_lens", (qq, k, v, kl.float()), {}, "kv_lens must be int32 or int64"),
        ("kv_lens", (qq, k, v, kl[:1]), {}, "kv_lens must have shape [2]"),
        ("kv_lens", (qq, k, v, _idx([9, 5], "cpu")), {}, "kv_lens[0] = 9 is out of range"),
        ("kv_lens", (qq, k, v, _idx([8, 2], "cpu")), {}, "kv_lens[1] = 2 is out of range"),
        ("lengths", (qq, k, v, kl, None, _idx([4, 1], "cpu")), {}, "lengths[0] = 4 is out of range [0, 3]"),
        ("mask", (qq, k, v, kl, eye.int()), {}, "mask must be bool"),
        ("mask", (qq, k, v, kl, eye[:, :2]), {}, "mask must have shape [2, 3, 3]"),
        ("mask", (qq, k, v, kl, late), {}, "mask[0, 0, 2] is True: a row sees no key of a later row"),
        ("mask", (qq, k, v, kl, blind), {}, "mask[1, 1, 1] is False: a row must see its own key"),
        ("scale", (qq, k, v, kl), {"scale": float("inf")}, "scale must be a finite number"),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_bad_input_names_the_argument(device, case):
    """(QWEN38_ATTN_CHECK_INDICES=1, the default, set here in case the environment turned it off.)"""
    name, args, kwargs, msg = _bad_cases()[case]
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    with knobs.override(QWEN38_ATTN_CHECK_INDICES="1"):
        with pytest.raises(ValueError, match=r"qwen38\.attn_decode: ") as e:
            q.attn_decode(*args, **kwargs)
    assert name in str(e.value) and msg in str(e.value), str(e.value)


# ---- the CUDA kernel ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_cuda_knob_0_is_the_reference():
    """QWEN38_ATTN_KERNEL=0: CUDA tensors take the reference, bit for bit; with 1 (the default) the
    kernels, within the bound but with other bits."""
    qq, k, v = _inputs(2, 5, 12, 2, 128, 300, seed=41, device="cuda")
    kl, mask = _idx([300, 280], "cuda"), torch.stack([ref.tree_mask([-1, 0, 0, 2, 3])] * 2).cuda()
    with knobs.override(QWEN38_ATTN_KERNEL="0"):
        o = q.attn_decode(qq, k, v, kl, mask)
    qt.assert_bitwise_equal(o, ref.attn_decode(qq, k, v, kl, mask), "default path")
    _check_f64(q.attn_decode(qq, k, v, kl, mask), qq, k, v, kl, mask, None)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_cuda_long_cache_within_the_f64_bound(dt):
    """The model's geometry over 2000 and 700 keys (rows of 3..8 splits, merged in order), a tree batch
    with a padding sequence tail; and the same at a 1-row decode."""
    qq, k, v = _inputs(2, 16, 24, 4, 256, 2000, seed=31, dt=dt, device="cuda")
    kl, ls = _idx([2000, 700], "cuda"), _idx([16, 9], "cuda")
    mask = torch.stack([ref.tree_mask([-1, 0, 1, 2, 1, 4, 0, 6, 7, 8, 9, -1, 11, 12, 12, 14]),
                        ref.tree_mask([-1, 0, 1, 1, 3, 4, 5, 6, 7] + [-1] * 7)]).cuda()
    o = q.attn_decode(qq, k, v, kl, mask, ls)
    _check_f64(o, qq, k, v, kl, mask, ls)
    assert not bool(o[1, 9:].float().cpu().any())
    one = q.attn_decode(qq[:, :1], k, v, _idx([1985, 692], "cuda"))
    _check_f64(one, qq[:, :1], k, v, _idx([1985, 692], "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("prefix", [700, 760, 1010, 1100])
def test_cuda_chain_rows_are_one_token_calls_at_long_prefixes(prefix):
    """16 chain rows after 700..1100 keys (across the 256-key split boundaries at 768 and 1024 and the
    chunk boundaries): each row == its one-token call, bit for bit."""
    t, hq, hkv, d = 16, 24, 4, 256
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t + 7, seed=prefix, device="cuda")
    o = q.attn_decode(qq, k, v, _idx([prefix + t], "cuda"))
    for r in range(t):
        one = q.attn_decode(qq[:, r:r + 1], k, v, _idx([prefix + r + 1], "cuda"))
        qt.assert_bitwise_equal(o[:, r], one[:, 0], f"chain row {r} after a prefix of {prefix}")


@pytest.mark.gpu
@pytest.mark.parametrize("prefix", [1020, 16370])
def test_cuda_tree_nodes_are_one_token_calls_at_long_prefixes(prefix):
    """A 24-node tree after 1020 keys (paths across the split boundary at 1024) and after 16370 (past
    16384 keys a split holds 5 chunks: rows of one CTA split differently): node i == the one-token call
    on the cache compacted to the prefix and i's path, bit for bit."""
    parents = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 4, 17, 18, -1, 20, 21, 0]
    t, hq, hkv, d = len(parents), 6, 1, 128
    qq, k, v = _inputs(1, t, hq, hkv, d, prefix + t, seed=7, device="cuda")
    mask = ref.tree_mask(parents)[None].cuda()
    o = q.attn_decode(qq, k, v, _idx([prefix + t], "cuda"), mask)
    for i in range(t):
        keep = _idx(list(range(prefix)) + [prefix + j for j in path_of(parents, i)], "cuda")
        one = q.attn_decode(qq[:, i:i + 1], k.index_select(2, keep), v.index_select(2, keep),
                            _idx([keep.numel()], "cuda"))
        qt.assert_bitwise_equal(o[:, i], one[:, 0], f"tree node {i} after {prefix}")


@pytest.mark.gpu
def test_cuda_graph_equals_eager_and_reads_the_index_values_at_replay():
    qq, k, v = _inputs(2, 8, 24, 4, 256, 1500, seed=21, device="cuda")
    kl, ls = _idx([1500, 900], "cuda"), _idx([8, 5], "cuda")
    mask = torch.stack([ref.tree_mask([-1, 0, 1, 1, -1, 4, 5, 6]), ref.tree_mask([-1, 0, 1, 2, 3, -1, -1, -1])]).cuda()
    qt.assert_graph_equals_eager(lambda *a: q.attn_decode(*a), qq, k, v, kl, mask, ls)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = q.attn_decode(qq, k, v, kl, mask, ls)
    kl.copy_(_idx([1200, 1400], "cuda"))  # new values in place: the replay must read them
    ls.copy_(_idx([6, 8], "cuda"))
    qq.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    qt.assert_bitwise_equal(out, q.attn_decode(qq, k, v, kl, mask, ls), "replay after new index values")


@pytest.mark.gpu
def test_cuda_unchecked_index_values_are_clamped():
    """QWEN38_ATTN_CHECK_INDICES=0: out-of-range values raise nothing and read nothing
    outside the cache (NaN there): lengths clamp to T, kv_lens to [length, L]; a row sees its own key and
    no later row's whatever the mask says."""
    qq, k, v = _inputs(2, 3, 4, 2, 64, 40, seed=4, device="cuda")
    big_k = torch.cat([k, torch.full_like(k, float("nan"))], 2)[:, :, :40]  # (a view: NaN past it)
    big_v = torch.cat([v, torch.full_like(v, float("nan"))], 2)[:, :, :40]
    with knobs.override(QWEN38_ATTN_CHECK_INDICES="0"):
        o = q.attn_decode(qq, big_k, big_v, _idx([99, 2], "cuda"), None, _idx([7, 3], "cuda"))
        want = q.attn_decode(qq, k, v, _idx([40, 3], "cuda"), None, _idx([3, 3], "cuda"))
        qt.assert_bitwise_equal(o, want, "clamped kv_lens and lengths")
        bad = torch.zeros(2, 3, 3, dtype=torch.bool, device="cuda")
        bad[:, 0, 2] = True  # a later row, and no own key anywhere
        qt.assert_bitwise_equal(q.attn_decode(qq, k, v, _idx([40, 9], "cuda"), bad),
                                q.attn_decode(qq, k, v, _idx([40, 9], "cuda"), torch.eye(3, dtype=torch.bool,
                                                                                     device="cuda").expand(2, 3, 3)),
                                "a row sees its own key only")


@pytest.mark.gpu
def test_cuda_misaligned_rows_are_refused():
    qq, k, v = _inputs(1, 2, 4, 1, 64, 10, seed=6, device="cuda")
    kl = _idx([10], "cuda")
    for name, args in (("q", (qt.offset_copy(qq, 4), k, v)), ("k_cache", (qq, qt.offset_copy(k, 2), v)),
                       ("v_cache", (qq, k, qt.offset_copy(v, 1)))):
        with pytest.raises(ValueError, match=rf"{name}'s rows must start 16-byte aligned"):
            q.attn_decode(*args, kl)
    ok = q.attn_decode(qq, k, v, kl)  # a strided view with 16-byte rows is fine
    wide = torch.zeros(1, 2, 8, 64, dtype=qq.dtype, device="cuda")
    wide[:, :, ::2] = qq
    qt.assert_bitwise_equal(q.attn_decode(wide[:, :, ::2], k, v, kl), ok, "strided q")


@pytest.mark.gpu
@pytest.mark.parametrize("split", ["1,16", "2,128"])
def test_cuda_split_rule_knob_keeps_rows_one_token_calls(split):
    """QWEN38_ATTN_SPLIT (the lab knob of the split rule): 16 chain rows after 1000 keys under another
    rule stay within the bound and equal their one-token calls under the same rule, bit for bit."""
    t, prefix = 16, 1000
    qq, k, v = _inputs(1, t, 24, 4, 256, prefix + t, seed=9, device="cuda")
    with knobs.override(QWEN38_ATTN_SPLIT=split):
        o = q.attn_decode(qq, k, v, _idx([prefix + t], "cuda"))
        _check_f64(o, qq, k, v, _idx([prefix + t], "cuda"), None, None)
        for r in (0, 7, 15):
            one = q.attn_decode(qq[:, r:r + 1], k, v, _idx([prefix + r + 1], "cuda"))
            qt.assert_bitwise_equal(o[:, r], one[:, 0], f"chain row {r} under split rule {split}")


@pytest.mark.gpu
@pytest.mark.parametrize("knob,bad,msg", [("QWEN38_ATTN_SPLIT", b, r"QWEN38_ATTN_SPLIT must be auto or MIN,MAX")
                                          for b in ["4", "0,64", "4,257", "x,y", "4,64,1"]]
                         + [("QWEN38_ATTN_SLOTS", b, r"QWEN38_ATTN_SLOTS must be 2 or 3, got") for b in ["4", "auto"]])
def test_cuda_bad_launch_knobs_are_refused(knob, bad, msg):
    qq, k, v = _inputs(1, 1, 4, 1, 64, 10, seed=6, device="cuda")
    with knobs.override(**{knob: bad}):
        with pytest.raises(ValueError, match=msg):
            q.attn_decode(qq, k, v, _idx([10], "cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("hq,hkv,d,t", [(24, 4, 256, 1), (24, 4, 256, 16), (8, 2, 128, 5), (4, 4, 64, 3)])
def test_cuda_two_and_three_kv_slots_give_the_same_bits(hq, hkv, d, t):
    """QWEN38_ATTN_SLOTS 2 (one chunk load in flight) and 3 (two) run the same arithmetic: the same bits,
    over rows of one and of several splits, a tree batch with a padding row."""
    qq, k, v = _inputs(2, t, hq, hkv, d, 1200, seed=d + t, device="cuda")
    kl, ls = _idx([1200, 333], "cuda"), _idx([t, max(t - 1, 1)], "cuda")
    parents = [-1] + [i // 2 for i in range(t - 1)]
    mask = torch.stack([ref.tree_mask(parents)] * 2).cuda()
    with knobs.override(QWEN38_ATTN_SLOTS="2"):
        o2 = q.attn_decode(qq, k, v, kl, mask, ls)
    with knobs.override(QWEN38_ATTN_SLOTS="3"):
        o3 = q.attn_decode(qq, k, v, kl, mask, ls)
    qt.assert_bitwise_equal(o3, o2, "three K/V slots against two")
    _check_f64(o2, qq, k, v, kl, mask, ls)
