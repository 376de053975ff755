# OpenVINO GenAI 2026.4.1 speculative decoding, T = 1, top-k 3, a draft identical to the target, 3 drafted tokens.
# usage: python repro.py DIR   (DIR: the IR of any small LLM, e.g. written by LLMPipeline(GGUF, "CPU",
#        enable_save_ov_model=True)); prints the prefix-caching crash count and position 1's law with / without draft
import collections
import sys

import numpy as np
import openvino as ov
import openvino_genai as g

ir, f32 = sys.argv[1], {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
ids = np.array([[1, 504, 2365, 6354, 16438, 28, 504, 2365, 6354]], dtype=np.int64)  # any prompt
inputs = g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
def pipe(draft, caching):
    s = g.SchedulerConfig()
    s.enable_prefix_caching = caching
    return g.LLMPipeline(ir, "CPU", scheduler_config=s, **({"draft_model": g.draft_model(ir, "CPU", **f32)} if draft else {}), **f32)
def run(p, seed, draft):
    c = g.GenerationConfig(max_new_tokens=4, do_sample=True, temperature=1.0, top_k=3, rng_seed=seed)
    c.num_assistant_tokens = 3 if draft else 0
    return list(p.generate(inputs, c).tokens[0])
crashed, p = [], pipe(True, True)  # 1. prefix caching on (the default): requests abort
for seed in range(40):
    try:
        run(p, seed, True)
    except RuntimeError as e:
        crashed, p = [*crashed, str(e).splitlines()[-1]], pipe(True, True)
print(f"prefix caching on: {len(crashed)}/40 requests aborted", crashed[:1])
laws = {d: collections.Counter(run(p, 10_000 * d + s, d)[1] for p in [pipe(d, False)] for s in range(300)) for d in (0, 1)}
print("position 1, off:", laws[0].most_common(4), "draft:", laws[1].most_common(4),
      f"TV ~ {0.5 * sum(abs(laws[1][t] - laws[0][t]) / 300 for t in set(laws[0]) | set(laws[1])):.2f}")
