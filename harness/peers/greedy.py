"""The engines' greedy end-to-end tests, as verdict functions of a §1b `generate` on a registered pair.

Each compares the implementation's temperature-0 continuation with the target's own greedy continuation
(harness.check.greedy: `greedy_target`, `greedy_impl`) — the engines compare a run with speculative decoding
against a run without it. Written from the published sources (no code copied):

- `vllm_greedy_66` — vLLM tests/v1/e2e/test_spec_decode.py (test_ngram_correctness, test_eagle_correctness, …):
  100 prompts, temperature 0, max_tokens 10; passes if more than int(0.66 · 100) = 66 outputs match exactly
  (`assert matches > int(0.66 * len(ref_outputs))`). vLLM compares text; here token ids (stricter).
- `sglang_one_prompt` — SGLang test/srt/test_eagle_infer.py::TestEAGLEEngine (read at sgl-project/sglang
  004d79c): `_test_single_generation`, one prompt, temperature 0, max_new_tokens 8, output equal to the reference
  engine's. γ = 5 (its speculative_num_steps; SGLang drafts a tree of 8 tokens, a chain here).
- `transformers_assisted_greedy` — transformers tests/generation/test_utils.py::
  test_assisted_decoding_matches_greedy_search: one input, max_new_tokens 4, num_assistant_tokens 2 (γ = 2),
  greedy; run with the assistant a different model ("random": the pair's draft) and the model itself ("same");
  passes if both equal plain greedy. (The published test also sets eos_token_id = −1; §1b has no EOS argument:
  a pair's own EOS applies to both sides alike.)
- `llamacpp_with_without_draft` — llama.cpp tools/server/tests/unit/test_speculative.py::
  test_with_and_without_draft: one prompt, temperature 0, top_k 1, n_predict 16, with and without the draft
  (draft_min 4: γ = 4); passes if equal. (Later versions send temperature 0.2, top_k 5 and a seed and compare
  tokens; the greedy form is the one the issue describes.)

The published tests use fixed prompts; here every seed draws its prompts (random token ids of the pair's prompt
length, the toy pairs' own kind of prompt), so a rate over seeds is the rate over prompts.
"""

from __future__ import annotations

from harness.check.greedy import greedy_impl, greedy_target
from harness.check.streams import numpy_rng
from harness.peers import PeerTest, PeerVerdict

PROMPT_LENGTH = 4  # the toy pairs' prompts are 4 token ids


def draw_prompts(pair, seed: int, count: int, name: str) -> list[list[int]]:
    """`count` prompts of random token ids for this seed and test (never EOS)."""
    rng = numpy_rng(seed, "probe", "peer-prompts", name)
    length = len(pair.prompts[0]) if pair.prompts else PROMPT_LENGTH
    allowed = [t for t in range(pair.vocab_size) if t != pair.eos_token_id]
    return [[int(t) for t in rng.choice(allowed, size=length)] for _ in range(count)]


def _matches(impl, pair, prompts, *, max_new_tokens: int, gamma: int, seed: int, draft=None) -> tuple[int, int]:
    """(prompts whose greedy continuation equals the target's, tokens the implementation generated)."""
    use = pair if draft is None else _with_draft(pair, draft)
    hits, tokens = 0, 0
    for prompt in prompts:
        want = greedy_target(pair, prompt, max_new_tokens)
        got = greedy_impl(impl, use, prompt, max_new_tokens=max_new_tokens, gamma=gamma, seed=seed)
        hits += got == want
        tokens += len(got)
    return hits, tokens


def _with_draft(pair, draft):
    import dataclasses

    return dataclasses.replace(pair, draft=draft)


def vllm_greedy_66(impl, pair, *, seed: int) -> PeerVerdict:
    prompts = draw_prompts(pair, seed, 100, "vllm")
    hits, tokens = _matches(impl, pair, prompts, max_new_tokens=10, gamma=3, seed=seed)
    need = int(0.66 * len(prompts))
    return PeerVerdict("vllm_greedy_66", hits > need, tokens, statistic=hits, threshold=need + 1,
                       detail=f"{hits}/{len(prompts)} prompts match exactly (pass: > {need})")


def sglang_one_prompt(impl, pair, *, seed: int) -> PeerVerdict:
    hits, tokens = _matches(impl, pair, draw_prompts(pair, seed, 1, "sglang"), max_new_tokens=8, gamma=5, seed=seed)
    return PeerVerdict("sglang_one_prompt", hits == 1, tokens, detail="equal" if hits else "differs")


def transformers_assisted_greedy(impl, pair, *, seed: int) -> PeerVerdict:
    prompts = draw_prompts(pair, seed, 1, "transformers")
    random_hits, t1 = _matches(impl, pair, prompts, max_new_tokens=4, gamma=2, seed=seed)
    same_hits, t2 = _matches(impl, pair, prompts, max_new_tokens=4, gamma=2, seed=seed, draft=pair.target)
    return PeerVerdict("transformers_assisted_greedy", bool(random_hits and same_hits), t1 + t2,
                       detail=f"random assistant {'equal' if random_hits else 'differs'}, same assistant "
                              f"{'equal' if same_hits else 'differs'}")


def llamacpp_with_without_draft(impl, pair, *, seed: int) -> PeerVerdict:
    hits, tokens = _matches(impl, pair, draw_prompts(pair, seed, 1, "llamacpp"), max_new_tokens=16, gamma=4,
                            seed=seed)
    return PeerVerdict("llamacpp_with_without_draft", hits == 1, tokens, detail="equal" if hits else "differs")


GREEDY_TESTS = [
    PeerTest("vllm_greedy_66", "vLLM", "generation", "vllm-project/vllm tests/v1/e2e/test_spec_decode.py "
             "(test_ngram_correctness / test_eagle_correctness)", 100, vllm_greedy_66,
             "100 prompts × 10 tokens, greedy; > 66 exact matches"),
    PeerTest("sglang_one_prompt", "SGLang", "generation", "sgl-project/sglang test/srt/test_eagle_infer.py::"
             "TestEAGLEEngine (_test_single_generation)", 1, sglang_one_prompt, "1 prompt × 8 tokens, greedy, equal"),
    PeerTest("transformers_assisted_greedy", "transformers", "generation", "huggingface/transformers "
             "tests/generation/test_utils.py::test_assisted_decoding_matches_greedy_search", 1,
             transformers_assisted_greedy, "1 input × 4 tokens, γ = 2, random and same assistant, equal"),
    PeerTest("llamacpp_with_without_draft", "llama.cpp", "generation", "ggml-org/llama.cpp tools/server/tests/unit/"
             "test_speculative.py::test_with_and_without_draft", 1, llamacpp_with_without_draft,
             "1 prompt × 16 tokens, greedy, with and without draft, equal"),
]

__all__ = ["GREEDY_TESTS", "draw_prompts", "llamacpp_with_without_draft", "sglang_one_prompt",
           "transformers_assisted_greedy", "vllm_greedy_66"]
