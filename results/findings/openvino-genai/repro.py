# OpenVINO GenAI 2026.4.1 speculative decoding, T = 1, top-k 3, a draft identical to the target, 3 drafted tokens.
# usage: python repro.py DIR   (DIR holds the IR of any small LLM, e.g. written by
#        LLMPipeline("SmolLM2-135M-Instruct.Q4_1.gguf", "CPU", enable_save_ov_model=True))
import collections, sys
import numpy as np, openvino as ov, openvino_genai as g

ir, f32 = sys.argv[1], {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
ids = np.array([[1, 504, 2365, 6354, 16438, 28, 504, 2365, 6354]], dtype=np.int64)  # any prompt
def pipe(draft, caching):
    s = g.SchedulerConfig(); s.enable_prefix_caching = caching
    kw = {"draft_model": g.draft_model(ir, "CPU", **f32)} if draft else {}
    return g.LLMPipeline(ir, "CPU", scheduler_config=s, **kw, **f32)
def run(p, seed, draft):
    c = g.GenerationConfig(max_new_tokens=4, do_sample=True, temperature=1.0, top_k=3, rng_seed=seed)
    if draft: c.num_assistant_tokens = 3
    return list(p.generate(g.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), c).tokens[0])
crashed, p = 0, pipe(True, True)  # 1. prefix caching on (the default): the request aborts
for seed in range(40):
    try: run(p, seed, True)
    except RuntimeError as e: crashed += 1; msg = str(e).splitlines()[-1]; p = pipe(True, True)
print(f"prefix caching on: {crashed}/40 requests aborted", msg if crashed else "")
laws = {}  # 2. prefix caching off: position 1's law with and without the draft
for draft in (False, True):
    p = pipe(draft, False)
    laws[draft] = collections.Counter(run(p, 10_000 * draft + s, draft)[1] for s in range(300))
tv = 0.5 * sum(abs(laws[True][t] - laws[False][t]) / 300 for t in set(laws[True]) | set(laws[False]))
print("position 1, off:", laws[False].most_common(4), "draft:", laws[True].most_common(4), f"TV ~ {tv:.2f}")
