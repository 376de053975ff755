"""ORT GenAI 0.18 speculative vs plain sampling; args: the spec and target folders of onnxruntime_genai.build."""
import collections
import sys

import numpy as np
import onnxruntime_genai as og

PROMPT, N = [12, 15, 5, 0], 4000


def draw(folder, spec, seed0):
    model, counts, kept = og.Model(folder), collections.Counter(), [0, 0]
    for s in range(N):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(PROMPT) + 2, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  random_seed=seed0 + s)
        params.set_speculative_options(**({"max_draft_tokens": 3} if spec else {}))
        g = og.Generator(model, params)
        g.append_tokens(np.array(PROMPT, dtype=np.int32))
        while not g.is_done():
            g.generate_next_token()
        counts[tuple(g.get_sequence(0)[len(PROMPT):].tolist())] += 1
        st = g.get_speculative_stats()
        kept = [kept[0] + st["draft_tokens_accepted"], kept[1] + st["draft_tokens_proposed"]]
    return counts, kept


(a, kept), (b, _) = draw(sys.argv[1], True, 0), draw(sys.argv[2], False, 10**6)
tv = sum(abs(a[k] - b[k]) for k in set(a) | set(b)) / (2 * N)
print(f"drafts kept {kept[0]}/{kept[1]}; empirical TV of the 2-token law, speculative vs plain: {tv:.3f} (N={N})")
