"""Prompt-lookup n-gram draft ("prompt lookup decoding", Saxena 2023,
https://github.com/apoorvumang/prompt-lookup-decoding) packaged as a transformers causal LM.

At every position t the draft looks for the longest suffix of the row's context ids[0..t] (n from
`max_ngram` down to 1) that also occurred earlier in that context, and predicts the token that followed
the most recent earlier occurrence; with no match it repeats the last token. Its logits are 0 at the
predicted token and -inf elsewhere, so q is one-hot at any temperature, top-k or top-p.

It has no KV cache: every call needs the whole context. The class says so with
`specdec_needs_full_context = True`; cache arguments are accepted and ignored, and the output carries
no cache. Pass `logits_to_keep=k` to compute only the last k positions (what decoding needs).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class NgramDraftConfig(PretrainedConfig):
    model_type = "specdec-ngram-draft"

    def __init__(self, vocab_size: int = 32000, max_ngram: int = 3, **kwargs):
        self.vocab_size = vocab_size  # logits width (the target's vocabulary)
        self.max_ngram = max_ngram  # longest suffix n-gram tried first
        super().__init__(**kwargs)


class NgramDraftModel(PreTrainedModel, GenerationMixin):
    """Draft q that copies from the context: one-hot logits at the prompt-lookup prediction."""

    config_class = NgramDraftConfig
    base_model_prefix = "ngram"
    main_input_name = "input_ids"
    specdec_needs_full_context = True  # runners must pass the full context and no cache

    def __init__(self, config: NgramDraftConfig):
        super().__init__(config)
        # No weights; this scalar only lets `.device` / `.dtype` / `.to()` work like on any model
        # (transformers reads them from the first parameter).
        self.anchor = nn.Parameter(torch.zeros(()), requires_grad=False)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:  # nothing to initialize
        pass

    def get_output_embeddings(self) -> None:
        return None

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.LongTensor,  # [B, L]
        attention_mask: torch.Tensor | None = None,  # [B, L]; 0 marks padding, which never matches
        logits_to_keep: int | torch.Tensor = 0,  # int k: the last k positions (0 = all); tensor: [K] positions
        **ignored,  # cache / past_key_values / use_cache / position_ids: meaningless without state
    ) -> CausalLMOutputWithPast:
        assert input_ids.dim() == 2, f"input_ids must be [B, L], got {tuple(input_ids.shape)}"
        ids = input_ids
        B, L = ids.shape
        if attention_mask is not None and attention_mask.dim() == 2:
            # Padding gets distinct negative ids so that no window containing it matches anything.
            unique_neg = -1 - torch.arange(B * L, device=ids.device).view(B, L)
            ids = torch.where(attention_mask.bool(), ids, unique_neg)
        if isinstance(logits_to_keep, torch.Tensor):
            positions = logits_to_keep.to(ids.device).flatten()  # [K]
        else:
            k = L if not logits_to_keep or logits_to_keep > L else int(logits_to_keep)
            positions = torch.arange(L - k, L, device=ids.device)  # [K]
        pred = predict_next(ids, positions, max_ngram=self.config.max_ngram)  # [B, K]
        logits = torch.full((B, positions.numel(), self.config.vocab_size), float("-inf"), dtype=self.anchor.dtype,
                            device=ids.device)  # [B, K, V]
        logits.scatter_(2, pred.clamp(min=0).unsqueeze(-1), 0.0)  # negative only at padding positions
        return CausalLMOutputWithPast(logits=logits, cache=None)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:  # generate() must not build a KV cache for it
        return False

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # transformers' generate() would slice input_ids to the tokens not yet in a cache; this model has
        # none, so it always gets the full context, and only the last position is needed.
        return {"input_ids": input_ids, "attention_mask": attention_mask, "logits_to_keep": 1}


def predict_next(
    ids: torch.Tensor,  # [B, L] int64 context (negative ids never match)
    positions: torch.Tensor,  # [K] int64 positions t at which to predict token t+1
    max_ngram: int,
) -> torch.Tensor:  # [B, K] int64 predicted next tokens
    """Prompt-lookup prediction at each of `positions`, using only ids[:, :t+1] for position t."""
    B, L = ids.shape
    pred = ids[:, positions].clone()  # fallback: repeat the last token
    # Try short n first, so that a longer match found later overrides it.
    for n in range(1, max_ngram + 1):
        if n > L:
            break
        windows = ids.unfold(1, n, 1)  # [B, L-n+1, n]; windows[:, e-n+1] = ids[e-n+1 .. e]
        query_ok = positions >= n - 1  # [K] the suffix of length n exists
        q = windows[:, (positions - (n - 1)).clamp(min=0)]  # [B, K, n] suffix ending at t
        ends = torch.arange(n - 1, L, device=ids.device)  # [L-n+1] end position e of each window
        match = (q.unsqueeze(2) == windows.unsqueeze(1)).all(-1)  # [B, K, L-n+1]
        match &= (ends.unsqueeze(0) < positions.unsqueeze(1)).unsqueeze(0)  # earlier occurrences only: e < t
        match &= query_ok.view(1, -1, 1)
        # Most recent match: the largest end e with a match (argmax of e+1 masked, 0 = none).
        score = torch.where(match, ends + 1, torch.zeros_like(ends))  # [B, K, L-n+1]
        best = score.amax(-1)  # [B, K]
        hit = best > 0
        follower = ids.gather(1, best)  # ids[e+1] with e+1 = best (ids[0] when no hit: unused)
        pred = torch.where(hit, follower, pred)
    return pred
