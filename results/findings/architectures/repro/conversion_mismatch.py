"""Why llama-server differs from transformers on the Bamba and Gemma 3 pairs with speculation off (README, engine
table): the same target weights, one config field changed, converted by the vendored convert_hf_to_gguf.py and
served by llama-server without a draft. For each variant: the greedy 12 tokens after [1, 2, 3, 4] from both, and
the top-5 probabilities at T = 1 after a 10-token context from llama-server beside transformers' under the
catalogue's config and under the variant's.
Needs llama-server (`nox -s engines`). Run from the repository root:
python results/findings/architectures/repro/conversion_mismatch.py"""
import copy
import json
import tempfile
from pathlib import Path

import httpx
import torch
from transformers import AutoModelForCausalLM

from harness.models.gguf_convert import convert
from harness.models.tiny_arch import wordpiece_tokenizer
from harness.pairs import get_pair
from harness.served.llama_server import cache_root, find_binary, server_command
from harness.served.process import served
from harness.served.vllm_server import free_port

PROMPT = [1, 2, 3, 4]
CONTEXT = PROMPT + [26, 41, 33, 5, 4, 41]


def rope(factor):
    def edit(cfg):
        cfg.rope_parameters = {**cfg.rope_parameters, "partial_rotary_factor": factor}
    return edit


def rotary_emb(dims):  # the key the converter reads for Bamba (its original config's), with the factor kept
    def edit(cfg):
        cfg.attn_rotary_emb = dims
    return edit


def attn_scalar(value):
    def edit(cfg):
        cfg.query_pre_attn_scalar = value
    return edit


def all_sliding(cfg):  # llama.cpp's Gemma 3 default pattern (every 6th layer global): both layers sliding
    cfg.layer_types = ["sliding_attention"] * cfg.num_hidden_layers


def both(*edits):
    def edit(cfg):
        for e in edits:
            e(cfg)
    return edit


def rebuilt(base, edit):
    cfg = copy.deepcopy(base.config)
    if edit is not None:
        edit(cfg)
    model = AutoModelForCausalLM.from_config(cfg).float().eval()
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and all("inv_freq" in m for m in missing), (missing, unexpected)
    return model


def hf_greedy(model, n=12):
    ids = list(PROMPT)
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids])
            ids.append(int(model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, -1].argmax()))
    return ids[len(PROMPT):]


def hf_probs(model, ids):
    with torch.no_grad():
        x = torch.tensor([CONTEXT])
        p = torch.softmax(model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, -1].double(), -1)
    return [round(float(p[i]), 4) for i in ids]


def served_answers(gguf: Path):
    port = free_port()
    with served(server_command(find_binary(), gguf, port, draft=None, ctx=256, slots=1), f"http://127.0.0.1:{port}",
                "/health", "llama-server", startup_timeout_s=120) as url:
        greedy = httpx.post(f"{url}/completion", json={"prompt": PROMPT, "n_predict": 12, "temperature": 0,
                                                       "return_tokens": True, "cache_prompt": False}, timeout=120)
        probs = httpx.post(f"{url}/completion", json={"prompt": CONTEXT, "n_predict": 1, "temperature": 1.0,
                                                      "top_k": 0, "top_p": 1.0, "min_p": 0.0, "n_probs": 5,
                                                      "post_sampling_probs": True, "cache_prompt": False}, timeout=120)
    top = probs.json()["completion_probabilities"][0]["top_probs"]
    return greedy.json()["tokens"], [p["id"] for p in top], [round(p["prob"], 4) for p in top]


VARIANTS = {
    "arch-mamba2-hybrid": [("as in the catalogue (partial_rotary_factor 0.5 in rope_parameters)", None),
                           ("partial_rotary_factor 1.0", rope(1.0)),
                           ("factor 0.5 and attn_rotary_emb = head_dim / 2 = 4", rotary_emb(4))],
    "arch-swa": [("as in the catalogue (query_pre_attn_scalar 256, head_dim 8)", None),
                 ("query_pre_attn_scalar = head_dim = 8", attn_scalar(8)),
                 ("and both layers sliding", both(attn_scalar(8), all_sliding))],
}

if __name__ == "__main__":
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for pair_name, variants in VARIANTS.items():
            pair = get_pair(pair_name)
            base = pair.target.float().eval()
            print(f"## {pair_name} ({base.config.model_type})")
            for k, (label, edit) in enumerate(variants):
                model = rebuilt(base, edit)
                folder = Path(tmp) / f"{pair_name}-{k}"
                model.save_pretrained(folder)
                wordpiece_tokenizer(pair.vocab_size).save_pretrained(folder)
                if getattr(model.config, "attn_rotary_emb", None) is not None:  # where the converter reads it
                    saved = json.loads((folder / "config.json").read_text())
                    saved["attn_rotary_emb"] = model.config.attn_rotary_emb
                    (folder / "config.json").write_text(json.dumps(saved))
                with open(Path(tmp) / "convert.log", "w") as log:
                    gguf = convert(cache_root() / "llama.cpp", folder, Path(tmp) / f"{pair_name}-{k}.gguf", log=log)
                tokens, ids, probs = served_answers(gguf)
                hf = hf_greedy(model)
                print(f"- {label}:\n  greedy llama-server {tokens}\n  greedy transformers {hf}  "
                      f"{'EQUAL' if tokens == hf else 'DIFFER'}\n  top-5 ids {ids}: llama-server {probs}; "
                      f"transformers (catalogue config) {hf_probs(base, ids)}; transformers (this variant) "
                      f"{hf_probs(model, ids)}", flush=True)
