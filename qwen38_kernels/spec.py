"""Greedy speculative decoding of an HF transformers Qwen3.5 / 3.8 model on the library's verify and
commit ops. HF's own assisted generation refuses these models (their Gated DeltaNet state cannot be
rolled back); here a round verifies the drafted tokens without writing the recurrent state and then
commits only the accepted ones:

    from qwen38_kernels import nn as qnn, spec
    qnn.swap_gdn(model)                       # (and the other swaps, for the kernels' speed)
    out = spec.generate(model, input_ids, max_new_tokens=128, draft=spec.prompt_lookup(), num_draft=7)
    out.tokens, out.stats                     # [1, L + new] token ids; rounds, drafted, accepted

A round feeds the pending token (chosen, not yet fed) and up to ``num_draft`` drafted tokens in one
forward. In each Gated DeltaNet layer (``nn.GatedDeltaNetDecode`` in verify mode) ``conv_chain`` and
``gdn_chain_verify`` compute every position's output from the cached state, which they only read; the
attention layers append to HF's KV cache as usual. The drafts are accepted up to the first one that
differs from the model's greedy choice (the argmax of the fp32 logits); ``commit`` then replays the
accepted tokens into the recurrent state (``gdn_commit``) and the conv state, and the attention
layers' caches drop the rejected positions. Nothing else changes, so the next round starts from the
state one-token decode would have reached.

Exactness: a verify row of a Gated DeltaNet layer is bit-identical to the corresponding one-token step
and the committed state to the stepped one (the ops' contract); with the norms, MLPs, linears and the
head swapped, every layer but HF's attention computes each row independently of the row count. HF's
attention over T queries is not guaranteed to give the bits of one query, so the logits of a verify can
differ from one-token decode in their last bits (and a near-tie could then pick another token); the
recurrent states of the layers before the first attention layer are bit-identical to one-token decode's
(``tests/test_spec.py``). Greedy only; batch size 1 (as HF's assisted generation).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .nn import GatedDeltaNetDecode

__all__ = ["generate", "prompt_lookup", "SpecOutput", "SpecStats", "MAX_VERIFY_TOKENS"]

MAX_VERIFY_TOKENS = 16  # the chain verify's limit: the pending token and up to 15 drafts

Draft = Callable[[Sequence[int], int], Sequence[int]]


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


def prompt_lookup(max_ngram: int = 3, min_ngram: int = 1) -> Draft:
    """A draft source without a second model ("prompt lookup"): the longest suffix of the tokens so far
    (``max_ngram`` down to ``min_ngram`` tokens) that occurred earlier, and the tokens that followed its
    latest earlier occurrence. Good where the output repeats its context (code, quotes, edits)."""
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(f"prompt_lookup: need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")

    def draft(tokens: Sequence[int], k: int) -> list[int]:
        toks = list(tokens)
        n_tok = len(toks)
        for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
            suffix = toks[n_tok - n:]
            for start in range(n_tok - n - 1, -1, -1):  # latest earlier occurrence first
                if toks[start:start + n] == suffix:
                    follow = toks[start + n:start + n + k]
                    if follow:
                        return follow
        return []

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


def _check_draft(d, k: int, vocab: int) -> list[int]:
    try:
        out = [int(t) for t in d][:k]
    except (TypeError, ValueError):
        raise ValueError(f"spec.generate: draft must return a sequence of token ids, got {type(d).__name__}") from None
    bad = [t for t in out if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"spec.generate: draft returned token ids outside the vocabulary [0, {vocab}): {bad[:4]}")
    return out


@torch.no_grad()
def generate(model: torch.nn.Module, input_ids: torch.Tensor, max_new_tokens: int, draft: Draft | None = None,
             num_draft: int = 4, eos_token_id: int | Sequence[int] | None = None) -> SpecOutput:
    """Greedy decoding of ``max_new_tokens`` tokens (fewer when an ``eos_token_id`` comes), verifying up to
    ``num_draft`` (1..15) drafted tokens a round.

    - ``model``: an HF transformers Qwen3.5 / 3.8 causal LM whose Gated DeltaNet modules are wrapped by
      ``nn.swap_gdn`` (the other swaps are optional); it must return ``.logits`` and
      ``.past_key_values`` (an HF 5 cache with per-layer states).
    - ``input_ids``: [1, L] prompt token ids (L >= 1) on the model's device.
    - ``draft(tokens, k)``: up to k proposed next tokens given every token so far (prompt, generated,
      and the pending one); default ``prompt_lookup()``. Returning fewer (or none) is fine: such a
      round is an ordinary decode step.

    The prompt is prefilled by the model's own forward. Returns the tokens and ``SpecStats``. An
    exception inside a round leaves the cache as the round found it."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1 \
            or input_ids.shape[1] < 1:
        got = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"spec.generate: input_ids must be a [1, L] tensor with L >= 1 (batch size 1), got {got}")
    if not 1 <= num_draft <= MAX_VERIFY_TOKENS - 1:
        raise ValueError(f"spec.generate: num_draft must be in 1..{MAX_VERIFY_TOKENS - 1}, got {num_draft}")
    if max_new_tokens < 0:
        raise ValueError(f"spec.generate: max_new_tokens must be >= 0, got {max_new_tokens}")
    draft = prompt_lookup() if draft is None else draft
    eos = set() if eos_token_id is None else {int(eos_token_id)} if isinstance(eos_token_id, int) \
        else {int(e) for e in eos_token_id}
    wrappers = _gdn_wrappers(model)
    stats = SpecStats()
    tokens = input_ids[0].tolist()
    if max_new_tokens == 0:
        return SpecOutput(input_ids.clone(), stats)

    # the cache keyword: `cache` in newer transformers (which deprecate `past_key_values`), else the old one
    try:
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        cache_kw = "past_key_values"
    out = model(input_ids, use_cache=True)
    cache = _cache_of(out)
    attn = _attention_layers(cache, {w.layer_idx for w in wrappers})
    vocab = out.logits.shape[-1]
    pending = int(out.logits[0, -1].float().argmax())
    generated = [pending]
    while len(generated) < max_new_tokens and pending not in eos:
        room = max_new_tokens - len(generated)  # a round emits its accepted drafts and one more token
        d = _check_draft(draft(tokens + generated, min(num_draft, room - 1)), min(num_draft, room - 1), vocab) \
            if room > 1 else []
        ids = torch.tensor([[pending] + d], dtype=input_ids.dtype, device=input_ids.device)
        lengths = [_seq_len(layer) for layer in attn]
        for w in wrappers:
            w.discard()
            w._verify = True
        try:
            out = model(ids, use_cache=True, **{cache_kw: cache})
            preds = out.logits[0, -ids.shape[1]:].float().argmax(-1).tolist()
        except BaseException:
            _drop_last(attn, lengths)
            for w in wrappers:
                w.discard()
            raise
        finally:
            for w in wrappers:
                w._verify = False
        n = 0
        while n < len(d) and d[n] == preds[n]:
            n += 1
        for w in wrappers:  # the pending token and the n accepted drafts enter the state
            w.commit(n + 1)
        _drop_last(attn, [x + n + 1 for x in lengths])
        stats.rounds += 1
        stats.drafted += len(d)
        stats.accepted += n
        stats.per_round.append(n)
        new = d[:n] + [preds[n]]
        for t in new:
            generated.append(t)
            if t in eos:
                break
        pending = generated[-1]
    gen = torch.tensor([generated], dtype=input_ids.dtype, device=input_ids.device)
    return SpecOutput(torch.cat([input_ids, gen], dim=1), stats, cache)
