"""Further host-emulation cases of the GDN kernel (tests/native/gdn_host_emulation.cpp runs the CUDA
source on the CPU): multi-round staging, long chains and commits, deep tree paths, long folded
commits, the non-16-byte staging path, fp16, int64 indices, random trees. Bit-exact vs the reference."""
import pathlib
import random
import sys
import pytest, torch
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_gdn as tg  # noqa: E402
from test_gdn import _inputs, _i, _pad_parents, _emulate, _check_emulated, ref, HV  # noqa: E402


@pytest.fixture(scope="session")
def emu(host_emulator):
    return host_emulator("gdn_host_emulation")


@pytest.mark.parametrize("dtype,vec16", [(torch.bfloat16, True), (torch.float16, False)])
def test_chain16(emu, tmp_path, dtype, vec16):
    q, k, v, g, beta, pool = _inputs(2, 16, seed=5, n_slots=3, dtype=dtype)
    slots, lengths = _i([2, 0]), _i([16, 9])
    o_ref = ref.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths)
    got = _emulate(emu, tmp_path, "chain", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   lengths=lengths, vec16=vec16)
    _check_emulated(got, (o_ref, pool), pool, "chain16")


def test_chain40(emu, tmp_path):  # more than one staging round (kernel generality)
    q, k, v, g, beta, pool = _inputs(1, 40, seed=6, n_slots=2)
    slots = _i([1])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, _i([[-1] + list(range(39))]))
    got = _emulate(emu, tmp_path, "chain", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots)
    _check_emulated(got, (o_ref, pool), pool, "chain40")


@pytest.mark.parametrize("vec16", [True, False])
def test_commit_long(emu, tmp_path, vec16):
    q, k, v, g, beta, pool = _inputs(2, 48, seed=7, n_slots=3, beta_fp32=True)
    slots, acc = _i([2, 1]), _i([45, 33])
    p_ref = pool.clone()
    ref.gdn_commit(k, v, g, beta, p_ref, slots, acc)
    got = _emulate(emu, tmp_path, "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   accepted=acc, vec16=vec16)
    _check_emulated(got, (None, p_ref), pool, "commit long")


def _deep_tree(n, spine):
    # a spine 0..spine-1, then leaves hung on the spine (still depth-first: appended at the end as
    # children of the last spine node), then more nodes
    par = [-1] + list(range(spine - 1))
    while len(par) < n:
        par.append(len(par) - 1 if len(par) % 3 else spine - 1)
    return par


def test_tree64_commit_deep(emu, tmp_path):
    par = [_deep_tree(64, 40)]
    # check depth-first validity with the test's own rule
    assert tg._first_invalid(par[0]) == 64
    q, k, v, g, beta, pool = _inputs(1, 64, seed=8, n_slots=2)
    parents, slots = _pad_parents(par, 64), _i([1])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents)
    got = _emulate(emu, tmp_path / "v", "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   parents=parents)
    _check_emulated(got, (o_ref, pool), pool, "tree64 deep verify")
    for acc in (63, 39, 50):
        p_ref = pool.clone()
        ref.gdn_commit(k, v, g, beta, p_ref, slots, _i([acc]), parents)
        got = _emulate(emu, tmp_path / f"c{acc}", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(),
                       slots=slots, accepted=_i([acc]), parents=parents)
        _check_emulated(got, (None, p_ref), pool, f"tree64 deep commit {acc}")


def test_tree_bench_shape(emu, tmp_path):
    par = [[-1, 0, -1, 2, -1, 4, 4, 4, 7, 8, 7, 10, 7, 12, 12, 12, 15, 16, 15, 18, 15, 20, 20, 20, 23, 24, 23,
            26, 23, 28, 28, 28]]
    q, k, v, g, beta, pool = _inputs(2, 32, seed=9, n_slots=3, dtype=torch.float16)
    parents, slots = _pad_parents(par * 2, 32), _i([2, 0])
    lengths = _i([32, 21])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    got = _emulate(emu, tmp_path, "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   parents=parents, lengths=lengths, idx64=True)
    _check_emulated(got, (o_ref, pool), pool, "tree bench shape")


def test_tree_rebuild_paths(emu, tmp_path):
    # Every way the tree kernel finds a node's parent state: held from the previous node (its
    # parent; or a leaf's sibling, whose u sum the leaf's pass forms: 5 -> 6, 11 -> 12); kept in
    # registers for a node with a later child (the last such node: 14, for 17); replayed from the
    # loaded tile when the kept one is another (7: parent 3 at depth 4, while 4 is kept; 8, 10, 18)
    # or none (13: the tile itself). Sequence 1 stops at 15 nodes.
    par = [-1, 0, 1, 2, 3, 4, 4, 3, 2, 8, 0, 10, 10, -1, 13, 14, 15, 14, 13]
    assert tg._first_invalid(par) == len(par)
    t = len(par)
    q, k, v, g, beta, pool = _inputs(2, t, seed=14, n_slots=3, dtype=torch.float16)
    parents, slots, lengths = _pad_parents([par, par], t), _i([2, 0]), _i([t, 15])
    o_ref = ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, parents, lengths)
    got = _emulate(emu, tmp_path, "tree", q=q, k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   parents=parents, lengths=lengths)
    _check_emulated(got, (o_ref, pool), pool, "tree rebuild paths")


def _check_commit_in_verify(emu, tmp_path, commit, verify, pool, slots, what, **kw):
    """The verify with the pending commit folded in (emulated) against the reference's commit, then
    verify. commit = (k, v, g, beta, accepted, parents or None); verify = (q, k, v, g, beta,
    parents or None (a chain), lengths)."""
    ck, cv_, cg, cbeta, c_acc, c_par = commit
    q, k, v, g, beta, v_par, lengths = verify
    p_ref = pool.clone()
    ref.gdn_commit(ck, cv_, cg, cbeta, p_ref, slots, c_acc, c_par)
    if v_par is not None:
        want = ref.gdn_tree_verify(q, k, v, g, beta, p_ref, slots, v_par, lengths)
    else:
        want = ref.gdn_chain_verify(q, k, v, g, beta, p_ref, slots, lengths)
    got = _emulate(emu, tmp_path, "tree" if v_par is not None else "chain", q=q, k=k, v=v, g=g, beta=beta,
                   pool=pool.clone(), slots=slots, parents=v_par, lengths=lengths, c_k=ck, c_v=cv_, c_g=cg,
                   c_beta=cbeta, c_accepted=c_acc, c_parents=c_par, **kw)
    _check_emulated(got, (want, p_ref), pool, what)


@pytest.mark.parametrize("v_tree", [False, True])
@pytest.mark.parametrize("c_tree", [False, True])
def test_civ_long(emu, tmp_path, c_tree, v_tree):
    tc, t = (64, 32) if v_tree else (40, 16)
    ck, cv_, cg, cbeta = _inputs(2, tc, seed=11)[1:5]
    q, k, v, g, beta, pool = _inputs(2, t, seed=12)
    c_par = _pad_parents([_deep_tree(tc, 36), _deep_tree(tc, 20)], tc)
    v_par = _pad_parents([_deep_tree(t, 10), [-1] + list(range(t - 1))], t)
    c_acc = _i([35, min(50, tc - 1)]) if c_tree else _i([37, 12])
    slots = _i([1, 2])
    lengths = _i([t, t - 3])
    _check_commit_in_verify(emu, tmp_path, (ck, cv_, cg, cbeta, c_acc, c_par if c_tree else None),
                            (q, k, v, g, beta, v_par if v_tree else None, lengths), pool, slots,
                            f"civ long c_tree {c_tree} v_tree {v_tree}")


def test_step_batch(emu, tmp_path):
    q, k, v, g, beta, pool = _inputs(9, 1, seed=13, n_slots=10, dtype=torch.float16, beta_fp32=True)
    slots = _i([4, -1, 1, 9, 0, 3, 4, 7, 8])
    args = (q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0])
    p_ref = pool.clone()
    # the reference with a repeated slot: the first sequence writes; emulate that by stepping only
    # the first occurrence, the output of the repeat is from the same loaded state
    o_ref = ref.gdn_step(*[a[:6] for a in args], p_ref, slots[:6])
    got = _emulate(emu, tmp_path, "step", q=args[0], k=args[1], v=args[2], g=args[3], beta=args[4],
                   pool=pool.clone(), slots=slots, idx64=True)
    hs = list(tg.EMU_HEADS)
    tg.qt.assert_bitwise_equal(got[0][:6][:, hs], o_ref[:, hs], "step outputs")
    tg.qt.assert_bitwise_equal(got[1][:, hs][[4, 1, 9, 0, 3]], p_ref[:, hs][[4, 1, 9, 0, 3]], "step states")



def _rand_tree(rng, n):
    parents, path = [], [-1]
    for i in range(n):
        d = rng.randint(1, len(path))
        parents.append(path[d - 1])
        del path[d:]
        path.append(i)
    return parents


@pytest.mark.parametrize("seed", range(6))
def test_random_rounds(emu, tmp_path, seed):
    rng = random.Random(seed)
    dtype = rng.choice([torch.bfloat16, torch.float16])
    idx64, vec16 = rng.random() < 0.5, rng.random() < 0.7
    tc, t = rng.randint(1, 40), rng.randint(1, 40)
    v_tree, c_tree = rng.random() < 0.5, rng.random() < 0.5
    if not v_tree:
        t = min(t, 16)
    ck, cv_, cg, cbeta = _inputs(2, tc, seed=100 + seed, dtype=dtype)[1:5]
    q, k, v, g, beta, pool = _inputs(2, t, seed=200 + seed, dtype=dtype, beta_fp32=rng.random() < 0.5)
    cbeta = cbeta.to(beta.dtype)
    c_par = _pad_parents([_rand_tree(rng, tc), _rand_tree(rng, tc)], tc)
    v_par = _pad_parents([_rand_tree(rng, t), _rand_tree(rng, t)], t)
    c_acc = _i([rng.randint(-1, tc - 1), rng.randint(-1, tc - 1)]) if c_tree else _i([rng.randint(0, tc), rng.randint(0, tc)])
    slots = _i(rng.sample(range(4), 2))
    lengths = _i([rng.randint(0, t), t])
    _check_commit_in_verify(emu, tmp_path / "civ", (ck, cv_, cg, cbeta, c_acc, c_par if c_tree else None),
                            (q, k, v, g, beta, v_par if v_tree else None, lengths), pool, slots,
                            f"random civ seed {seed}", idx64=idx64, vec16=vec16)
    # the same verify without the pending commit, and a commit of it
    want = (ref.gdn_tree_verify(q, k, v, g, beta, pool, slots, v_par, lengths) if v_tree
            else ref.gdn_chain_verify(q, k, v, g, beta, pool, slots, lengths))
    got = _emulate(emu, tmp_path / "v", "tree" if v_tree else "chain", q=q, k=k, v=v, g=g, beta=beta,
                   pool=pool.clone(), slots=slots, parents=v_par if v_tree else None, lengths=lengths,
                   idx64=idx64, vec16=vec16)
    _check_emulated(got, (want, pool), pool, f"random verify seed {seed}")
    acc = _i([rng.randint(-1, t - 1), rng.randint(-1, t - 1)]) if v_tree else _i([rng.randint(0, t), rng.randint(0, t)])
    p_ref = pool.clone()
    ref.gdn_commit(k, v, g, beta, p_ref, slots, acc, v_par if v_tree else None)
    got = _emulate(emu, tmp_path / "c", "commit", k=k, v=v, g=g, beta=beta, pool=pool.clone(), slots=slots,
                   accepted=acc, parents=v_par if v_tree else None, idx64=idx64, vec16=vec16)
    _check_emulated(got, (None, p_ref), pool, f"random commit seed {seed}")
