"""Greedy speculative decoding of an HF transformers Qwen3.5 / 3.8 model on the library's verify and
commit ops. HF's own assisted generation refuses these models (their Gated DeltaNet state cannot be
rolled back); here a round verifies the drafted tokens without writing the recurrent state and then
commits only the accepted ones:

    from qwen38_kernels import nn as qnn, spec
    qnn.swap_gdn(model)                       # (and the other swaps, for the kernels' speed)
    out = spec.generate(model, input_ids, max_new_tokens=128, draft=spec.prompt_lookup(), num_draft=7)
    out.tokens, out.stats                     # [1, L + new] token ids; rounds, drafted, accepted

A round feeds the pending token (chosen, not yet fed) and the drafted tokens in one forward: a chain
(a list) or a tree (``DraftTree``, depth-first order; the attention layers get its mask and each node's
depth as its position). In each Gated DeltaNet layer (``nn.GatedDeltaNetDecode`` in verify mode)
``conv_chain`` / ``conv_tree`` and ``gdn_chain_verify`` / ``gdn_tree_verify`` compute every row's output
from the cached state, which they only read; the attention layers append to HF's KV cache as usual.
The greedy path through the drafts is accepted (each drafted token that equals the argmax of its
parent row's logits; with ``Sampling``, the path rejection sampling takes); ``commit`` then replays
it into the recurrent state (``gdn_commit``, or folded into the next round's verify:
``gdn_commit_verify``) and the conv state, and the attention layers' caches keep only its positions.
Nothing else changes, so the next round starts from the state one-token decode would have reached.

Exactness: a verify row of a Gated DeltaNet layer is bit-identical to the corresponding one-token step
and the committed state to the stepped one (the ops' contract); with the norms, MLPs, linears and the
head swapped, every layer but HF's attention computes each row independently of the row count. HF's
attention over T queries is not guaranteed to give the bits of one query, so the logits of a verify can
differ from one-token decode in their last bits (and a near-tie could then pick another token); the
recurrent states of the layers before the first attention layer, and the attention keys and values, are
bit-identical to one-token decode's (``tests/test_spec.py``). Greedy, or sampled (``Sampling``: the drafts
accepted by rejection sampling); batch size 1 (as HF's assisted generation).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .nn import GatedDeltaNetDecode
from .reference.attn import tree_mask

__all__ = ["generate", "prompt_lookup", "prompt_lookup_tree", "DraftTree", "Sampling", "SpecOutput", "SpecStats",
           "MAX_VERIFY_TOKENS", "MAX_TREE_NODES"]

MAX_VERIFY_TOKENS = 16  # the chain verify's limit: the pending token and up to 15 drafts

Draft = Callable[[Sequence[int], int], Sequence[int]]  # (prompt_lookup_tree's drafts return a DraftTree)


@dataclass
class SpecStats:
    rounds: int = 0        # verify forwards (each one model call)
    drafted: int = 0       # drafted tokens verified
    accepted: int = 0      # drafted tokens accepted
    per_round: list[int] = field(default_factory=list)  # accepted drafts of each round

    @property
    def tokens_per_round(self) -> float:
        """Tokens emitted per model call (1.0 without drafts)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0


@dataclass
class SpecOutput:
    tokens: torch.Tensor   # [1, L + new]: the prompt, then the generated tokens
    stats: SpecStats
    past_key_values: object = None  # HF's cache: every token but the last generated one fed (as HF's generate)


@dataclass
class DraftTree:
    """A drafted tree below the pending token. Verify row 0 is the pending token; row j (1..n) is
    ``tokens[j - 1]``, whose parent row is ``parents[j - 1]`` (0: the pending token). Rows come in
    depth-first order: each parent is the row before it or one of that row's ancestors."""
    tokens: list[int]
    parents: list[int]

    def rows(self) -> list[int]:
        """The verify's parent indices, row 0 (the pending token) included: -1, then ``parents``."""
        return [-1] + [int(p) for p in self.parents]


MAX_TREE_NODES = 64  # the tree verify's limit: the pending token and up to 63 drafted nodes


def _tree_depths(parents: list[int], where: str) -> list[int]:
    """Depths of the rows of a verify tree (root 0), after checking the depth-first order."""
    depth, path = [0], [0]  # path: the rows from the root to the previous row
    for j in range(1, len(parents)):
        p = parents[j]
        if p not in path:
            raise ValueError(f"{where}: drafted row {j} has parent {p}, which is neither the row before it nor one "
                             "of that row's ancestors (rows must come in depth-first order)")
        del path[path.index(p) + 1:]
        path.append(j)
        depth.append(depth[p] + 1)
    return depth


def _continuations(toks: list[int], k: int, max_ngram: int, min_ngram: int, most: int) -> list[list[int]]:
    """The next (up to) k tokens after each of the latest ``most`` earlier occurrences of the longest suffix
    of ``toks`` (``max_ngram`` down to ``min_ngram`` tokens) that occurred earlier, latest first."""
    n_tok, conts = len(toks), []
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        suffix = toks[n_tok - n:]
        for start in range(n_tok - n - 1, -1, -1):
            if toks[start:start + n] == suffix:
                conts.append(toks[start + n:start + n + k])
                if len(conts) == most:
                    return conts
        if conts:
            return conts
    return conts


def prompt_lookup(max_ngram: int = 3, min_ngram: int = 1) -> Draft:
    """A draft source without a second model ("prompt lookup"): the longest suffix of the tokens so far
    (``max_ngram`` down to ``min_ngram`` tokens) that occurred earlier, and the tokens that followed its
    latest earlier occurrence. Good where the output repeats its context (code, quotes, edits)."""
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(f"prompt_lookup: need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")

    def draft(tokens: Sequence[int], k: int) -> list[int]:
        conts = _continuations(list(tokens), k, max_ngram, min_ngram, 1)
        return conts[0] if conts else []

    return draft


def prompt_lookup_tree(max_ngram: int = 3, min_ngram: int = 1, branches: int = 4) -> Callable:
    """Prompt lookup with several candidates: the continuations of up to ``branches`` earlier
    occurrences of the longest recurring suffix n-gram (latest first), merged into a tree (shared
    prefixes once) of at most ``k`` drafted nodes. For ``generate(..., draft=prompt_lookup_tree())``."""
    if not 1 <= min_ngram <= max_ngram or branches < 1:
        raise ValueError(f"prompt_lookup_tree: need 1 <= min_ngram <= max_ngram and branches >= 1, got "
                         f"{min_ngram}, {max_ngram}, {branches}")

    def draft(tokens: Sequence[int], k: int) -> DraftTree:
        conts = _continuations(list(tokens), k, max_ngram, min_ngram, branches)
        kids: dict[int, list[tuple[int, int]]] = {0: []}  # trie node -> [(token, node)], in insertion order
        n_nodes = 0
        for cont in conts:
            node = 0
            for t in cont:
                nxt = next((c for tok, c in kids[node] if tok == t), None)
                if nxt is None:
                    if n_nodes == k:
                        break
                    n_nodes += 1
                    nxt = n_nodes
                    kids[node].append((t, nxt))
                    kids[nxt] = []
                node = nxt
        tree_tokens, parents = [], []
        stack = [(tok, c, 0) for tok, c in reversed(kids[0])]  # depth-first pre-order, rows renumbered
        while stack:
            tok, node, parent_row = stack.pop()
            tree_tokens.append(tok)
            parents.append(parent_row)
            row = len(tree_tokens)
            stack.extend((t, c, row) for t, c in reversed(kids[node]))
        return DraftTree(tree_tokens, parents)

    return draft


def _gdn_wrappers(model: torch.nn.Module) -> list[GatedDeltaNetDecode]:
    wrappers = [m for m in model.modules() if isinstance(m, GatedDeltaNetDecode)]
    if not wrappers:
        raise ValueError("spec.generate: the model has no GatedDeltaNetDecode modules; run "
                         "qwen38_kernels.nn.swap_gdn(model) first")
    return wrappers


def _attention_layers(cache, gdn_layers: set[int]) -> list:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise RuntimeError(f"spec.generate: the model returned a {type(cache).__name__} without per-layer caches "
                           "(HF transformers 5 layout expected)")
    out = []
    for i, layer in enumerate(layers):
        if i in gdn_layers:
            continue
        if hasattr(layer, "conv_states") or hasattr(layer, "recurrent_states"):
            raise ValueError(f"spec.generate: cache layer {i} holds a recurrent state but its module is not wrapped "
                             "by qwen38_kernels.nn.swap_gdn (a verify would advance it for every drafted token)")
        if not hasattr(layer, "crop"):
            raise RuntimeError(f"spec.generate: cache layer {i} ({type(layer).__name__}) cannot drop rejected tokens")
        out.append(layer)
    return out


def _cache_of(out):
    cache = getattr(out, "past_key_values", None)
    cache = getattr(out, "cache", None) if cache is None else cache
    if cache is None:
        raise RuntimeError("spec.generate: the model's output holds no cache (past_key_values)")
    return cache


def _seq_len(layer) -> int:
    return int(layer.get_seq_length()) if hasattr(layer, "get_seq_length") else 0


def _drop_last(layers: list, lengths: list[int]) -> None:
    """Crops each attention layer's cache back to its length in ``lengths``."""
    for layer, n in zip(layers, lengths):
        extra = _seq_len(layer) - n
        if extra > 0:
            layer.crop(-extra)  # (negative: remove that many, in every HF 5 version)


def _check_draft(d, vocab: int, k: int | None = None) -> list[int]:
    """The first k (None: all) token ids of a draft, checked against the vocabulary."""
    try:
        out = [int(t) for t in d][:k]
    except (TypeError, ValueError):
        raise ValueError(f"spec.generate: draft must return a sequence of token ids, got {type(d).__name__}") from None
    bad = [t for t in out if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"spec.generate: draft returned token ids outside the vocabulary [0, {vocab}): {bad[:4]}")
    return out


@dataclass(frozen=True)
class Sampling:
    """Sampling instead of greedy choice: softmax(logits / temperature), then (optionally) the ``top_k``
    largest and the smallest set of those whose mass reaches ``top_p``, renormalized. ``generator``: a
    CPU ``torch.Generator`` for the draws (reproducible runs). The drafts are accepted by rejection
    sampling, so the tokens follow the distribution of sampling one token at a time."""
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    generator: torch.Generator | None = None

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"Sampling: temperature must be > 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"Sampling: top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"Sampling: top_p must be in (0, 1], got {self.top_p}")

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """[R, V] logits -> [R, V] fp32 probabilities."""
        x = logits.float() / self.temperature
        if self.top_k is not None and self.top_k < x.shape[-1]:
            kth = x.topk(self.top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        p = torch.softmax(x, dim=-1)
        if self.top_p is not None and self.top_p < 1:
            sp, idx = p.sort(dim=-1, descending=True)
            drop = sp.cumsum(-1) - sp >= self.top_p  # (mass before a token already reaches top_p)
            p = p.scatter(-1, idx, sp.masked_fill(drop, 0.0))
            p = p / p.sum(-1, keepdim=True)
        return p


def _walk(rows: list[int], toks: list[int], logits: torch.Tensor, sampling: Sampling | None) -> tuple[list[int], int]:
    """The accepted rows (root first) and the next token, from the verify's [T, V] logits. Greedy: each
    drafted child that is its parent row's argmax. Sampling: at each row its children are tried in order,
    child c accepted with probability p(c) of the row's distribution, else p(c) is set to 0 and p
    renormalized (rejection sampling of deterministic drafts: the emitted tokens follow p exactly); the
    next token is drawn from what is left of the last row's p."""
    t = len(rows)
    kids: dict[int, list[int]] = {}
    for j in range(1, t):
        kids.setdefault(rows[j], []).append(j)
    path = [0]
    if sampling is None:
        preds = logits.argmax(-1).tolist()
        while True:
            nxt = next((j for j in kids.get(path[-1], []) if toks[j - 1] == preds[path[-1]]), None)
            if nxt is None:
                return path, preds[path[-1]]
            path.append(nxt)
    probs, g = sampling.probs(logits), sampling.generator
    while True:
        p = probs[path[-1]].double().cpu()
        for j in kids.get(path[-1], []):
            tok = toks[j - 1]
            if float(torch.rand((), dtype=torch.float64, generator=g)) < float(p[tok]):
                path.append(j)
                break
            p[tok] = 0.0
            p = p / p.sum()
        else:
            return path, int(torch.multinomial(p, 1, generator=g))


def _check_tree(d: DraftTree, k: int, vocab: int) -> tuple[list[int], list[int]]:
    """The tree's tokens and parents, checked (the parents' depth-first order: ``_tree_depths``)."""
    toks, parents = _check_draft(d.tokens, vocab), [int(p) for p in d.parents]
    if len(toks) != len(parents):
        raise ValueError(f"spec.generate: a DraftTree needs one parent per token, got {len(toks)} tokens and "
                         f"{len(parents)} parents")
    if len(toks) > k:
        raise ValueError(f"spec.generate: draft returned a tree of {len(toks)} nodes, more than the {k} asked for")
    return toks, parents


def _keep_rows(layers: list, lengths: list[int], rows: list[int]) -> None:
    """Keeps in each attention layer's cache its first ``lengths[i]`` positions (those before the verify),
    then verify rows ``rows``."""
    for layer, past in zip(layers, lengths):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
            raise RuntimeError(f"spec.generate: a tree needs attention cache layers with keys and values tensors, got "
                               f"{type(layer).__name__}")
        keep = torch.cat([torch.arange(past), torch.tensor(rows, dtype=torch.long) + past]).to(keys.device)
        layer.keys, layer.values = keys.index_select(-2, keep), values.index_select(-2, keep)


@torch.no_grad()
def generate(model: torch.nn.Module, input_ids: torch.Tensor, max_new_tokens: int, draft: Callable | None = None,
             num_draft: int = 4, eos_token_id: int | Sequence[int] | None = None,
             fold_commits: bool = True, sampling: Sampling | None = None,
             on_tokens: Callable[[list[int]], None] | None = None) -> SpecOutput:
    """Greedy decoding (or, with ``sampling``, sampling) of ``max_new_tokens`` tokens (fewer when an
    ``eos_token_id`` comes), verifying up to ``num_draft`` (1..63) drafted tokens a round.

    - ``model``: an HF transformers Qwen3.5 / 3.8 causal LM whose Gated DeltaNet modules are wrapped by
      ``nn.swap_gdn`` (the other swaps are optional); it must return ``.logits`` and
      ``.past_key_values`` (an HF 5 cache with per-layer states).
    - ``input_ids``: [1, L] prompt token ids (L >= 1) on the model's device.
    - ``draft(tokens, k)``: given every token so far (prompt, generated, and the pending one), either a
      list of up to k next tokens (a chain) or a ``DraftTree`` of up to k nodes (alternatives verified
      side by side; the attention layers get the tree's mask and depth positions); default
      ``prompt_lookup()``. Fewer (or none) is fine: such a round is an ordinary decode step. A chain of
      up to 15 tokens runs the chain kernels, anything else the tree kernels (up to 63 nodes).

    - Exactness past 32 verify rows: up to 32 every swapped GEMM gives each row its 1-row bits; past 32
      ``nvfp4_linear`` takes its prefill strategy, which ``QWEN38_NVFP4_PREFILL=chunked`` keeps
      row-invariant (32-row slices; auto may pick a faster one that is not).
    - ``on_tokens(new)``: called with each round's emitted tokens as they are known (streaming output;
      the first call has the prefill's token).
    - ``sampling``: a ``Sampling`` (temperature, top_k, top_p, generator): the drafts are accepted by
      rejection sampling, so the output follows the distribution of one-token sampling; None: greedy.
    - ``fold_commits``: each round's commit of the recurrent state is folded into the next round's verify
      (``gdn_commit_verify``: one state read and write a round instead of two reads and a write; the same
      bits); the last one is replayed before returning.

    The prompt is prefilled by the model's own forward. Returns the tokens, ``SpecStats`` and the cache
    (its states those of the tokens fed). An exception inside a round leaves the cache as the round found
    it (with the previous round's commit applied)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1 \
            or input_ids.shape[1] < 1:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"spec.generate: input_ids must be a [1, L] tensor with L >= 1 (batch size 1), got {got}")
    if not 1 <= num_draft <= MAX_TREE_NODES - 1:
        raise ValueError(f"spec.generate: num_draft must be in 1..{MAX_TREE_NODES - 1}, got {num_draft}")
    if max_new_tokens < 0:
        raise ValueError(f"spec.generate: max_new_tokens must be >= 0, got {max_new_tokens}")
    draft = prompt_lookup() if draft is None else draft
    eos = set() if eos_token_id is None else {int(eos_token_id)} if isinstance(eos_token_id, int) \
        else {int(e) for e in eos_token_id}
    wrappers = _gdn_wrappers(model)
    if max_new_tokens == 0:
        return SpecOutput(input_ids.clone(), SpecStats())

    # the cache keyword: `cache` in newer transformers (which deprecate `past_key_values`), else the old one
    try:
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        cache_kw = "past_key_values"
    for w in wrappers:
        w.flush()
        w.fold_commits = bool(fold_commits)
    try:
        return _generate(model, input_ids, max_new_tokens, draft, num_draft, eos, wrappers, cache_kw, sampling,
                         on_tokens)
    finally:
        for w in wrappers:
            w.flush()
            w.fold_commits = False


def _generate(model, input_ids, max_new_tokens, draft, num_draft, eos, wrappers, cache_kw, sampling,
              on_tokens) -> SpecOutput:
    stats = SpecStats()
    tokens = input_ids[0].tolist()
    out = model(input_ids, use_cache=True)
    cache = _cache_of(out)
    attn = _attention_layers(cache, {w.layer_idx for w in wrappers})
    vocab = out.logits.shape[-1]
    dtype = out.logits.dtype if not attn else attn[0].keys.dtype
    dev = input_ids.device
    pending = _walk([-1], [], out.logits[0, -1:], sampling)[1]
    generated = [pending]
    if on_tokens is not None:
        on_tokens([pending])
    while len(generated) < max_new_tokens and pending not in eos:
        room = max_new_tokens - len(generated)  # a round emits its accepted drafts and one more token
        k = min(num_draft, room - 1)
        d = draft(tokens + generated, k) if k > 0 else []
        if isinstance(d, DraftTree):
            toks, parents = _check_tree(d, k, vocab)
        else:
            toks = _check_draft(d, vocab, k)
            parents = list(range(len(toks)))  # a chain: row j's parent is row j - 1
        rows = [-1] + parents
        tree = isinstance(d, DraftTree) or len(toks) > MAX_VERIFY_TOKENS - 1
        depth = _tree_depths(rows, "spec.generate") if tree else list(range(len(rows)))
        ids = torch.tensor([[pending] + toks], dtype=input_ids.dtype, device=dev)
        t = ids.shape[1]
        kwargs = {cache_kw: cache}
        lengths = [_seq_len(layer) for layer in attn]
        if tree:
            past = int(cache.get_seq_length())
            anc = tree_mask(rows)  # anc[i, j]: row j is row i or an ancestor of it
            mask = torch.zeros(1, 1, t, past + t, dtype=dtype)
            mask[0, 0, :, past:].masked_fill_(~anc, torch.finfo(dtype).min)
            kwargs["attention_mask"] = mask.to(dev)
            kwargs["position_ids"] = (torch.tensor(depth, dtype=torch.long) + past)[None].to(dev)
            par = torch.tensor([rows], dtype=torch.int64, device=dev)
        for w in wrappers:
            w.discard()
            w._verify, w._tree = True, (rows, par) if tree else None
        try:
            out = model(ids, use_cache=True, **kwargs)
            # the accepted rows (the pending token first) and the next token
            path, nxt = _walk(rows, toks, out.logits[0, -t:], sampling)
        except BaseException:
            _drop_last(attn, lengths)
            for w in wrappers:
                w.discard()
            raise
        finally:
            for w in wrappers:
                w._verify, w._tree = False, None
        n = len(path) - 1
        for w in wrappers:  # the pending token and the n accepted drafts enter the state
            w.commit(path[-1] if tree else n + 1)
        if tree:
            _keep_rows(attn, lengths, path)
        else:
            _drop_last(attn, [x + n + 1 for x in lengths])
        stats.rounds += 1
        stats.drafted += len(toks)
        stats.accepted += n
        stats.per_round.append(n)
        new = []
        for tok in [toks[j - 1] for j in path[1:]] + [nxt]:
            new.append(tok)
            if tok in eos:
                break
        generated += new
        pending = generated[-1]
        if on_tokens is not None:
            on_tokens(new)
    gen = torch.tensor([generated], dtype=input_ids.dtype, device=dev)
    return SpecOutput(torch.cat([input_ids, gen], dim=1), stats, cache)
