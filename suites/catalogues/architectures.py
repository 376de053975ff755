"""Tiny offline pairs, one per cache family that is not a plain croppable KV cache (issue 44): sliding window,
hybrid linear attention, hybrid SSM, pure SSM, conv hybrid, MoE with a sliding window. Each is built from a
transformers config in code (harness/models/tiny_arch.py, no hub); the draft is the target with perturbed
weights (same vocabulary). Windows (8) and SSM chunks (8) are far shorter than the context catalogue's prompts
(4 … 221 tokens, harness/contexts.py), so every context straddles them many times.

Measured acceptance per draft position and the target's entropy are written in each pair's description
(suites/campaigns/architectures.py measures them again: `specdec campaign architectures --parts shape`)."""

from __future__ import annotations

import functools

from harness.models.pair import PairSpec

VOCAB = 48  # ≤ 64: the generation check enumerates short continuations exactly
CONTEXT = 320  # the context catalogue's longest prompt (221) + its continuation (40), with room
WINDOW = 8  # sliding window: far inside every context
CHUNK = 8  # SSM scan chunk: prompts straddle chunk boundaries
INIT = 0.3  # initializer_range: laws neither flat (ln 48 = 3.87 nats) nor one-hot

_COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
               head_dim=8, max_position_embeddings=CONTEXT, tie_word_embeddings=False, initializer_range=INIT,
               bos_token_id=None, eos_token_id=None, pad_token_id=None)

# name -> (cache family, transformers model_type, config beyond _COMMON, draft noise)
FAMILIES = {
    "arch-swa": ("sliding window (Gemma 3)", "gemma3_text",
                 dict(num_hidden_layers=2, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
                 0.2),
    "arch-linear": ("hybrid linear attention, gated delta net + MoE (Qwen3-Next)", "qwen3_next",
                    dict(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                         linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
                         linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=16, shared_expert_intermediate_size=16), 0.1),
    "arch-ssm-hybrid": ("hybrid SSM, Mamba + attention + MoE (Jamba)", "jamba",
                        dict(num_hidden_layers=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                             expert_layer_offset=1, num_experts=2, num_experts_per_tok=1, mamba_d_state=8,
                             mamba_dt_rank=4, mamba_expand=2, mamba_d_conv=4), 0.1),
    "arch-mamba2-hybrid": ("hybrid SSM, Mamba2 + attention (Bamba)", "bamba",
                           dict(num_hidden_layers=2, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16,
                                mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=CHUNK, mamba_d_conv=4), 0.1),
    "arch-ssm": ("pure SSM (Mamba2)", "mamba2",
                 dict(num_hidden_layers=2, num_heads=4, head_dim=16, state_size=8, expand=2, n_groups=1,
                      chunk_size=CHUNK, conv_kernel=4), 0.1),
    "arch-conv": ("conv hybrid, short conv + attention (LFM2)", "lfm2",
                  dict(num_hidden_layers=2, layer_types=["conv", "full_attention"], conv_L_cache=3,
                       block_ff_dim=64), 0.1),
    "arch-moe-swa": ("MoE with a sliding window (gpt-oss)", "gpt_oss",
                     dict(num_hidden_layers=2, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
                          num_local_experts=4, num_experts_per_tok=2), 0.1),
}

PROMPTS = [[1, 2, 3, 4], [5, 9, 7, 30, 11, 2, 40, 17, 8, 3, 21, 6]]  # the second straddles the window

# Measured (float64, 16 random 40-token contexts, every position): mean α = Σ min(p, q) with its 10–90% range, and
# the target's mean entropy in nats (ln 48 = 3.87 is flat). Per-position acceptance of the reference's own steps:
# `specdec campaign architectures --parts shape` (results/findings/architectures).
MEASURED = {"arch-swa": (0.685, "0.56–0.79", 2.76), "arch-linear": (0.538, "0.27–0.76", 2.72),
            "arch-ssm-hybrid": (0.510, "0.25–0.75", 2.67), "arch-mamba2-hybrid": (0.574, "0.36–0.76", 2.71),
            "arch-ssm": (0.734, "0.58–0.86", 2.71), "arch-conv": (0.640, "0.45–0.80", 2.74),
            "arch-moe-swa": (0.519, "0.29–0.73", 2.67)}


def _available() -> tuple[bool, str]:
    try:
        import transformers
    except ImportError:
        return False, "needs transformers"
    major = int(transformers.__version__.split(".")[0])
    return (major >= 5, "" if major >= 5 else f"needs transformers >= 5 (found {transformers.__version__})")


def _factory(name: str):
    family, model_type, config, noise = FAMILIES[name]

    def build(device: str = "cpu", dtype=None, **options):
        from harness.models.tiny_arch import tiny_pair

        return tiny_pair(name, model_type, {**_COMMON, **config}, noise=options.get("noise", noise),
                         seed=options.get("seed", 0), device=device, dtype=dtype,
                         description=f"{family}: tiny {model_type}, V = {VOCAB}", prompts=PROMPTS,
                         meta={"family": family})

    return functools.update_wrapper(build, _factory)


def _description(name: str) -> str:
    family, model_type, _config, _noise = FAMILIES[name]
    alpha, spread, entropy = MEASURED[name]
    return f"{family} — tiny {model_type}, draft = perturbed target; α ≈ {alpha} ({spread}), H ≈ {entropy} nats"


PAIRS = [PairSpec(name, _factory(name), _description(name), _available, ("architectures",)) for name in FAMILIES]
