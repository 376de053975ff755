"""How often the 26-layer draft served to vLLM agrees with the target in-process (section 6): greedy agreement and
α = Σ min(p, q) at T = 1 over the target's 32-token greedy continuation of each prompt (raw prompt, no chat template).
Run from the repository root: python results/findings/vllm-cpu/repro/draft_agreement_in_process.py"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from harness.models.smollm2 import default_cache_dir, materialized_truncated_draft
from suites.campaigns._servers import COPY_PROMPT, OPEN_PROMPT
from suites.campaigns.vllm_cpu import DRAFT_LAYERS

target = AutoModelForCausalLM.from_pretrained(default_cache_dir(), dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained(materialized_truncated_draft(DRAFT_LAYERS), dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(default_cache_dir())
for name, prompt in (("copy", COPY_PROMPT), ("open", OPEN_PROMPT)):
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        full = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False)
        mask = torch.ones_like(full)
        p_logits = target(full, attention_mask=mask).logits[0, ids.shape[1] - 1:-1]
        q_logits = draft(full, attention_mask=mask).logits[0, ids.shape[1] - 1:-1]
    agree = (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean().item()
    alpha = torch.minimum(p_logits.softmax(-1), q_logits.softmax(-1)).sum(-1).mean().item()
    print(f"{name} prompt: {full.shape[1] - ids.shape[1]} positions, greedy agreement {agree:.3f}, alpha (T=1) {alpha:.3f}")
