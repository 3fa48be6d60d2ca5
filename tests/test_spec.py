"""qwen38_kernels.spec: greedy speculative decoding of an HF Qwen3.5 model on the verify and commit ops,
against one-token greedy decoding of the same swapped model. Skips where transformers has no Qwen3.5
(CI installs no transformers); the draft-source and argument checks run everywhere."""
from __future__ import annotations

import copy
import pathlib
import sys

import pytest
import torch

from qwen38_kernels import nn as qnn
from qwen38_kernels import spec

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_hf import DEVICES, _gdn_qwen3_5  # noqa: E402


def _swapped(device, layers=4, attention=False):
    """The tiny model at the kernels' GDN geometry with every swap: the norms, MLPs and linears (the
    reference quantizer), the head, the GDN wrappers, and with `attention` the attention layers. Every
    layer but HF's attention then computes each row independently of the row count."""
    model = _gdn_qwen3_5(device, layers)
    qnn.swap_norms(model)
    qnn.swap_mlps(model)
    qnn.swap_linears(model)
    qnn.swap_head(model)
    assert qnn.swap_gdn(model) == 3 * layers // 4
    if attention:
        assert qnn.swap_attention(model) >= layers // 4
    return model


def _states(cache, layers=(0, 1, 2)):
    return [(cache.layers[i].conv_states[0].clone(), cache.layers[i].recurrent_states[0].clone()) for i in layers]


def _oracle(truth, wrong_every, vocab=512):
    """A draft source that knows the greedy continuation `truth` (prompt + generated) and gets every
    `wrong_every`-th proposed token wrong, so rounds accept 0..k drafts."""
    calls = [0]

    def draft(tokens, k):
        n = len(tokens)
        out = []
        for j in range(k):
            if n + j >= len(truth):
                break
            calls[0] += 1
            t = truth[n + j]
            out.append((t + 1) % vocab if calls[0] % wrong_every == 0 else t)
        return out

    return draft


def _greedy(model, ids, steps):
    """One-token greedy decoding: prefill, then feed each chosen token. Returns the `steps` tokens chosen
    and the cache after feeding all but the last (as generate leaves it)."""
    out = model(ids, use_cache=True)
    cache, chosen = out.past_key_values, [int(out.logits[0, -1].float().argmax())]
    while len(chosen) < steps:
        nxt = torch.tensor([[chosen[-1]]], dtype=ids.dtype, device=ids.device)
        out = model(nxt, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        chosen.append(int(out.logits[0, -1].float().argmax()))
    return chosen, cache


def _reference(device, steps, layers=4, attention=False):
    """The swapped model, a prompt, and one-token greedy decoding of `steps` tokens on a copy of the
    model: (model, prompt ids, prompt + greedy tokens, the copy's cache after all but the last)."""
    model = _swapped(device, layers, attention)
    ref_model = copy.deepcopy(model)
    ids = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad():
        chosen, ref_cache = _greedy(ref_model, ids, steps)
    if not all(w.fast_steps == steps - 1 for w in ref_model.modules() if isinstance(w, qnn.GatedDeltaNetDecode)):
        pytest.skip("this transformers' cache is not the layout swap_gdn knows (HF's forward ran)")
    return model, ids, ids[0].tolist() + chosen, ref_cache


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_draft,wrong_every,fold", [(4, 3, True), (7, 5, False), (15, 1000, True),
                                                        (30, 7, True)])
def test_speculative_greedy_is_one_token_greedy(device, num_draft, wrong_every, fold):
    """The tokens spec.generate emits are those of one-token greedy decoding, and the three GDN layers
    (before the model's attention layer) end with the conv and recurrent states of one-token decoding,
    bit for bit: every round verified, then committed only the accepted tokens."""
    steps = 20
    model, ids, truth, ref_cache = _reference(device, steps)
    got = spec.generate(model, ids, max_new_tokens=steps, draft=_oracle(truth, wrong_every), num_draft=num_draft,
                        fold_commits=fold)
    _check_against_greedy(got, ref_cache, truth, steps, ids)
    st = got.stats
    assert st.rounds < steps - 1 and st.drafted >= st.accepted > 0
    if wrong_every < 100:
        assert st.drafted > st.accepted  # some drafts were rejected
    assert all(w.verifies == st.rounds and w.fast_steps == 0
               for w in model.modules() if isinstance(w, qnn.GatedDeltaNetDecode))
    assert int(got.past_key_values.get_seq_length()) == int(ref_cache.get_seq_length()) == ids.shape[1] + steps - 1


def _tree_oracle(truth, wrong_every, vocab=512):
    """A tree draft: at every depth a decoy (every other one with a child of its own) before the node
    that follows the greedy continuation (wrong every `wrong_every`-th time), so the accepted path
    leaves each node through its last child, after the decoys' subtrees (depth-first order)."""
    calls = [0]

    def draft(tokens, k):
        n, toks, parents, parent, i = len(tokens), [], [], 0, 0
        while len(toks) + 3 <= k and n + i < len(truth):
            calls[0] += 1
            t = truth[n + i]
            toks.append((t + 7) % vocab)
            parents.append(parent)  # the decoy
            if i % 2:
                toks.append((t + 11) % vocab)
                parents.append(len(toks) - 1)  # the decoy's child
            toks.append((t + 1) % vocab if calls[0] % wrong_every == 0 else t)
            parents.append(parent)
            parent = len(toks)
            i += 1
        return spec.DraftTree(toks, parents)

    return draft


def _check_against_greedy(got, ref_cache, truth, steps, ids):
    assert got.tokens[0].tolist() == truth
    st = got.stats
    assert st.accepted + st.rounds == steps - 1  # every round emits its accepted drafts and one more token
    for (c_ref, s_ref), (c_got, s_got) in zip(_states(ref_cache), _states(got.past_key_values)):
        assert torch.equal(c_got, c_ref)
        assert torch.equal(s_got, s_ref)
    # the attention layer keeps the accepted positions only, their keys and values those of one-token decoding
    # (the k / v projections, norms and RoPE positions row-invariant)
    a_got, a_ref = got.past_key_values.layers[3], ref_cache.layers[3]
    assert a_got.keys.shape[-2] == ids.shape[1] + steps - 1
    assert torch.equal(a_got.keys, a_ref.keys) and torch.equal(a_got.values, a_ref.values)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_draft,wrong_every,fold", [(9, 3, True), (20, 4, False), (63, 1000, True)])
def test_tree_speculation_is_one_token_greedy(device, num_draft, wrong_every, fold, monkeypatch):
    """Drafted trees (decoys beside the greedy path, depth-first order) verified by conv_tree and
    gdn_tree_verify, the attention layer under the tree's mask at depth positions, the accepted path
    committed: the tokens, the GDN layers' states and the attention cache's keys and values are those
    of one-token greedy decoding, bit for bit."""
    # past 32 rows nvfp4_linear takes its prefill strategy (auto may pick one that is not row-invariant):
    # the 32-row slices keep every row's 1-row bits (on the CPU every strategy is the reference)
    monkeypatch.setenv("QWEN38_NVFP4_PREFILL", "chunked")
    steps = 24
    model, ids, truth, ref_cache = _reference(device, steps)
    got = spec.generate(model, ids, max_new_tokens=steps, draft=_tree_oracle(truth, wrong_every),
                        num_draft=num_draft, fold_commits=fold)
    _check_against_greedy(got, ref_cache, truth, steps, ids)
    assert got.stats.rounds < steps - 1 and got.stats.drafted > got.stats.accepted > 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_failed_round_leaves_the_cache_as_it_was(device):
    """A draft source that raises, and a forward that raises mid-round: the exception reaches the caller,
    the attention cache is back at its length and no verify wrote a state. With the commits folded into
    the verifies, the previous round's commit is applied (by the verifies that ran, then by the final
    flush): the same states as without folding."""
    model = _swapped(device)
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(5)).to(device)

    def bad_draft(tokens, k):
        raise KeyError("draft failed")

    with pytest.raises(KeyError, match="draft failed"):
        spec.generate(model, ids, max_new_tokens=5, draft=bad_draft)

    finals = []
    for fold in (False, True):
        m = copy.deepcopy(model)
        wrapped = [x for x in m.modules() if isinstance(x, qnn.GatedDeltaNetDecode)]
        inner = wrapped[2].gdn.out_proj
        real_forward, calls, snap, seen = inner.forward, [0], {}, {}

        def failing(x, inner_forward=real_forward, calls=calls, snap=snap, wrapped=wrapped):
            calls[0] += 1
            if calls[0] == 3:  # the prefill, round 1, then round 2 fails in the last GDN layer
                snap["cache"] = wrapped[2]._cache  # (set by the verify under way)
                snap["states"] = _states(snap["cache"])
                raise RuntimeError("boom")
            return inner_forward(x)

        inner.forward = failing
        real_drop = spec._drop_last

        def spy_drop(layers, lengths, seen=seen, real_drop=real_drop):
            real_drop(layers, lengths)
            seen["after"] = [spec._seq_len(x) for x in layers]
            seen["want"] = list(lengths)

        spec._drop_last = spy_drop
        try:
            with pytest.raises(RuntimeError, match="boom"):
                spec.generate(m, ids, max_new_tokens=8, draft=lambda t, k: [1, 2, 3][:k], num_draft=3,
                              fold_commits=fold)
        finally:
            spec._drop_last = real_drop
            inner.forward = real_forward
        assert seen["after"] == seen["want"]  # the attention layer's cache back to its length
        assert all(w._pending is None and w._cache is None and w._deferred is None and not w._verify
                   and not w.fold_commits for w in wrapped)
        final = _states(snap["cache"])
        if not fold:  # the verifies wrote nothing
            for (c0, s0), (c1, s1) in zip(snap["states"], final):
                assert torch.equal(c0, c1) and torch.equal(s0, s1)
        finals.append(final)
    for (c0, s0), (c1, s1) in zip(*finals):
        assert torch.equal(c0, c1) and torch.equal(s0, s1)


def test_prompt_lookup():
    d = spec.prompt_lookup(max_ngram=3)
    assert d([5, 6, 7, 8, 9, 5, 6, 7], 3) == [8, 9, 5]       # the 3-gram 5 6 7 recurs
    assert d([1, 2, 3, 4, 2], 2) == [3, 4]                   # only the 1-gram 2 recurs
    assert d([1, 2, 3, 4], 2) == []                          # nothing recurs
    assert d([4, 1, 4, 2, 4], 2) == [2, 4]                   # the latest earlier occurrence
    assert d([7], 4) == []
    with pytest.raises(ValueError, match="min_ngram"):
        spec.prompt_lookup(max_ngram=1, min_ngram=2)


def test_prompt_lookup_tree():
    d = spec.prompt_lookup_tree(max_ngram=2, branches=3)
    # the 2-gram (1, 2) recurs three times, followed by 3 4 9 .. / 3 5 0 .. / 6 0 ..: latest first, the
    # shared 3 once, at most k nodes
    toks = [1, 2, 6, 0, 1, 2, 3, 5, 0, 1, 2, 3, 4, 9, 1, 2]
    tree = d(toks, 6)
    assert tree.tokens == [3, 4, 9, 1, 2, 5] and tree.parents == [0, 1, 2, 3, 4, 1]
    assert spec._tree_depths(tree.rows(), "t") == [0, 1, 2, 3, 4, 5, 2]  # (depth-first order checked)
    assert d(toks, 2) == spec.DraftTree([3, 4], [0, 1])
    tree = d([1, 2, 7, 1, 2, 8, 1, 2], 6)  # two branches, renumbered depth-first
    assert tree.tokens == [8, 1, 2, 7, 1, 2] and tree.parents == [0, 1, 2, 0, 4, 5]
    assert d([1, 2, 3], 4).tokens == []
    with pytest.raises(ValueError, match="branches"):
        spec.prompt_lookup_tree(branches=0)


def test_tree_order_is_checked():
    assert spec._tree_depths([-1, 0, 1, 0, 3], "t") == [0, 1, 2, 1, 2]
    with pytest.raises(ValueError, match="drafted row 4 has parent 1"):
        spec._tree_depths([-1, 0, 1, 0, 1], "t")  # row 1 is not an ancestor of row 3


def test_generate_checks_its_arguments():
    m = torch.nn.Linear(2, 2)
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="swap_gdn"):
        spec.generate(m, ids, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"input_ids must be a \[1, L\]"):
        spec.generate(m, torch.zeros(2, 3, dtype=torch.long), max_new_tokens=4)
    with pytest.raises(ValueError, match="num_draft must be in 1..63"):
        spec.generate(m, ids, max_new_tokens=4, num_draft=64)
    with pytest.raises(ValueError, match="max_new_tokens"):
        spec.generate(m, ids, max_new_tokens=-1)


def test_stats():
    s = spec.SpecStats(rounds=4, drafted=12, accepted=6, per_round=[3, 0, 2, 1])
    assert s.tokens_per_round == 2.5
    assert spec.SpecStats().tokens_per_round == 0.0


def test_generate_refuses_an_unwrapped_gdn_layer():
    """A GDN module left unwrapped would advance its state for every drafted token: refused after the
    prefill, before any verify."""
    model = _swapped("cpu")
    layer = model.model.layers[1]
    layer.linear_attn = layer.linear_attn.gdn  # unwrap one
    ids = torch.randint(0, 512, (1, 5), generator=torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match="cache layer 1 holds a recurrent state"):
        spec.generate(model, ids, max_new_tokens=4)


def test_rejection_sampling_keeps_the_distribution():
    """_walk's sampling on a fixed tree of deterministic drafts (vocab 5: the pending token's row with
    children 1, 3 and 1 again; child 1 with a child 2): the first emitted token follows the root row's
    distribution, and after an accepted 1 the second follows row 1's, within the statistics of 40000
    draws (fixed seed)."""
    rows, toks = [-1, 0, 1, 0, 0], [1, 2, 3, 1]
    probs = torch.tensor([[0.1, 0.4, 0.05, 0.3, 0.15],
                          [0.5, 0.1, 0.2, 0.1, 0.1],
                          [0.2, 0.2, 0.2, 0.2, 0.2],
                          [0.6, 0.1, 0.1, 0.1, 0.1],
                          [0.2, 0.2, 0.2, 0.2, 0.2]])
    sampling = spec.Sampling(generator=torch.Generator().manual_seed(11))
    n, first, second = 40000, torch.zeros(5), torch.zeros(5)
    for _ in range(n):
        path, nxt = spec._walk(rows, toks, probs.log(), sampling)
        emitted = [toks[j - 1] for j in path[1:]] + [nxt]
        assert 4 not in path  # the second draft of token 1 is never taken: 1 was accepted or zeroed first
        first[emitted[0]] += 1
        if emitted[0] == 1:
            second[emitted[1]] += 1
    assert float((first / n - probs[0]).abs().max()) < 0.01
    assert float((second / second.sum() - probs[1]).abs().max()) < 0.015


def test_sampling_transform():
    s = spec.Sampling(temperature=0.5, top_k=3, top_p=0.9)
    logits = torch.tensor([[2.0, 1.0, 0.5, 3.0, -1.0]])
    p = s.probs(logits)
    assert p[0, 1] == 0 and p[0, 2] == 0 and p[0, 4] == 0  # top_k keeps 3, 0, 1; top_p then drops 1
    want = torch.softmax(torch.tensor([3.0, 2.0]) / 0.5, 0)
    assert torch.allclose(p[0, [3, 0]], want / want.sum())
    with pytest.raises(ValueError, match="temperature"):
        spec.Sampling(temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        spec.Sampling(top_p=1.5)


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_with_one_candidate_is_greedy(device):
    """Sampling with top_k = 1 puts all the mass on the argmax: the rejection sampler must then give
    greedy decoding's tokens and states (trees of drafts, folded commits)."""
    steps = 16
    model, ids, truth, ref_cache = _reference(device, steps)
    got = spec.generate(model, ids, max_new_tokens=steps, draft=_tree_oracle(truth, 4), num_draft=12,
                        sampling=spec.Sampling(top_k=1, generator=torch.Generator().manual_seed(0)))
    _check_against_greedy(got, ref_cache, truth, steps, ids)
    assert got.stats.accepted > 0


@pytest.mark.parametrize("device", DEVICES)
def test_streaming_callback(device):
    """on_tokens gets the prefill's token, then each round's emitted tokens, in order: together the
    generated tokens, one call a round after the first."""
    steps = 12
    model, ids, truth, _ = _reference(device, steps)
    calls = []
    got = spec.generate(model, ids, max_new_tokens=steps, draft=_oracle(truth, 3), num_draft=4,
                        on_tokens=calls.append)
    assert [t for c in calls for t in c] == got.tokens[0, ids.shape[1]:].tolist() == truth[ids.shape[1]:]
    assert len(calls) == got.stats.rounds + 1 and len(calls[0]) == 1


def _exact_spec(device, tree, attention, monkeypatch, steps=14):
    """spec.generate on 8 layers (GDN x 3, attention, GDN x 3, attention) against one-token greedy
    decoding: (the round's result, the reference cache, the GDN layers after the first attention layer
    bit-equal to the reference's)."""
    monkeypatch.setenv("QWEN38_NVFP4_PREFILL", "chunked")
    model, ids, truth, ref_cache = _reference(device, steps, layers=8, attention=attention)
    draft = _tree_oracle(truth, 5) if tree else _oracle(truth, 4)
    got = spec.generate(model, ids, max_new_tokens=steps, draft=draft, num_draft=9 if tree else 6)
    later = [i for i in (4, 5, 6)
             if all(torch.equal(a, b) for a, b in zip(_states(got.past_key_values, (i,))[0],
                                                      _states(ref_cache, (i,))[0]))]
    return got, ref_cache, truth, ids, later


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tree", [False, True])
def test_attention_swapped_every_layer_is_one_token_decode(device, tree, monkeypatch):
    """With swap_attention too, the layers after an attention layer see verify rows with one-token
    decode's bits: the GDN layers behind the model's first attention layer end with the states of
    one-token greedy decoding, and the second attention layer's keys and values are its, bit for bit."""
    steps = 14
    got, ref_cache, truth, ids, later = _exact_spec(device, tree, True, monkeypatch, steps)
    assert got.tokens[0].tolist() == truth
    assert got.stats.accepted > 0 and got.stats.rounds < steps - 1
    assert later == [4, 5, 6]
    for i in (0, 1, 2):
        got_i, ref_i = _states(got.past_key_values, (i,))[0], _states(ref_cache, (i,))[0]
        assert all(torch.equal(a, b) for a, b in zip(got_i, ref_i))
    for i in (3, 7):
        a_got, a_ref = got.past_key_values.layers[i], ref_cache.layers[i]
        assert a_got.keys.shape[-2] == ids.shape[1] + steps - 1
        assert torch.equal(a_got.keys, a_ref.keys) and torch.equal(a_got.values, a_ref.values)


def test_hf_attention_alone_breaks_the_later_layers(monkeypatch):
    """The control of the test above: with HF's own attention, the verify rows leaving the first
    attention layer are not one-token decode's, and some GDN layer behind it ends with other bits."""
    got, ref_cache, truth, ids, later = _exact_spec("cpu", False, False, monkeypatch)
    assert later != [4, 5, 6]


@pytest.mark.parametrize("device", DEVICES)
def test_swapped_attention_computes_what_hf_computes(device):
    """A prefill of 12 tokens (HF's sdpa past 64 rows only: these 12 go through attn_decode) and 4
    one-token steps: the logits of the model with swap_attention against HF's own attention, to a few
    bf16 ulps of the hidden states (another sum order); a wiring error (heads, scale, mask) moves them
    by their own size."""
    model = _gdn_qwen3_5(device, layers=4)
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(4)).to(device)
    with torch.no_grad():
        want = _decode_logits(model, ids, 4)
        qnn.swap_attention(model)
        got = _decode_logits(model, ids, 4)
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 2e-2, f"logits differ by {err:.3g} of their largest magnitude"


def _decode_logits(model, ids, steps):
    out = model(ids, use_cache=True)
    cache, logits = out.past_key_values, [out.logits[0].float()]
    for i in range(steps):
        nxt = logits[-1][-1:].argmax(-1, keepdim=True)
        out = model(nxt, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits.append(out.logits[0].float())
    return torch.cat(logits)


def test_attention_forward_refuses_masks_it_cannot_take():
    """attn_decode rows see the whole committed prefix: a padding mask, a mask differing by head, or a
    bias in an additive mask raise ValueError naming the problem."""
    q = torch.randn(1, 4, 3, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 7, 64, dtype=torch.bfloat16)
    mod = torch.nn.Module()
    causal = torch.ones(3, 7, dtype=torch.bool).tril(4)[None, None]
    o, w = qnn.attention_forward(mod, q, k, k, causal, scaling=0.25)
    assert w is None and o.shape == (1, 3, 4, 64)
    assert torch.equal(o, qnn.attention_forward(mod, q, k, k, None, scaling=0.25)[0])
    padded = causal.clone()
    padded[..., 0] = False
    with pytest.raises(ValueError, match="hides part of the cached prefix"):
        qnn.attention_forward(mod, q, k, k, padded)
    with pytest.raises(ValueError, match="0 \\(attend\\) or the dtype's minimum"):
        qnn.attention_forward(mod, q, k, k, torch.where(causal, 0.0, -1.0))
    with pytest.raises(ValueError, match="differs between heads"):
        qnn.attention_forward(mod, q, k, k, torch.cat([causal, padded], 1))
