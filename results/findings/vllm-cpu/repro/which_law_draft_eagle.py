"""Which law do the sampled tokens of the draft-model and EAGLE runs follow? Randomized PIT of each kept token
under the untruncated T=0.7 law, the law asked for (T=0.7, top-p 0.9) and T=1, local float64 target (section 6).
Run: python repro/which_law_draft_eagle.py responses/engine-5723e00cd6e3d261.jsonl responses/engine-bbaf8cfc39650309.jsonl"""
import json
import sys

import numpy as np
import torch
from scipy import stats
from transformers import AutoModelForCausalLM

from harness.models.smollm2 import default_cache_dir

torch.set_num_threads(2)
m = AutoModelForCausalLM.from_pretrained(default_cache_dir(), dtype=torch.float64).eval()
rng = np.random.default_rng(0)
for path in sys.argv[1:]:
    rows = []
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        r = json.loads(line)
        if not r["key"].startswith("engine/T=0.7,top_p=0.9"):
            continue
        for ch in r["response"]["choices"]:
            rows.append((r["response"]["choices"][0]["prompt_token_ids"], ch["token_ids"]))
    pit = {"untruncated": [], "top_p": [], "T=1": []}
    outside = total = 0
    for i in range(0, len(rows), 32):
        batch = rows[i:i + 32]
        seqs = [torch.tensor(p + t) for p, t in batch]
        L = max(len(s) for s in seqs)
        ids = torch.stack([torch.nn.functional.pad(s, (0, L - len(s)), value=2) for s in seqs])
        mask = torch.stack([torch.nn.functional.pad(torch.ones(len(s), dtype=torch.long), (0, L - len(s))) for s in seqs])
        with torch.no_grad():
            logits = m(input_ids=ids, attention_mask=mask).logits
        for b, (p, t) in enumerate(batch):
            for j, tok in enumerate(t):
                lg = logits[b, len(p) - 1 + j] / 0.7
                prob = torch.softmax(lg, -1)
                order = torch.argsort(prob, descending=True)
                cum = torch.cumsum(prob[order], 0)
                keep = order[: int((cum < 0.9).sum()) + 1]
                nuc = torch.zeros_like(prob)
                nuc[keep] = prob[keep]
                nuc /= nuc.sum()
                total += 1
                outside += int(nuc[tok] == 0)
                for name, law in (("untruncated", prob), ("top_p", nuc), ("T=1", torch.softmax(logits[b, len(p) - 1 + j], -1))):
                    below = law[law > law[tok]].sum().item() if law[tok] > 0 else None
                    if below is None:
                        continue
                    pit[name].append(below + rng.random() * law[tok].item())
    print(path, f"tokens {total}, outside nucleus {outside} ({outside / total:.1%})")
    for name, u in pit.items():
        print(f"  {name}: n {len(u)}, KS vs uniform p = {stats.kstest(u, 'uniform').pvalue:.3g}, "
              f"chi2(10 bins) p = {stats.chisquare(np.histogram(u, 10, (0, 1))[0]).pvalue:.3g}", np.histogram(u, 10, (0, 1))[0].tolist())
