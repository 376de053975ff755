"""harness.adapters.vllm_fix: the fixed expand kernel (torch only), and the sitecustomize that loads it into every
process of a server (a stand-in `vllm` package: no vLLM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.adapters import vllm_fix

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dtype, values, fill", [(torch.float32, [0.7, 0.0, 1.3], 1.0), (torch.int32, [5, 0, 9], 0),
                                                 (torch.int64, [5, 7, 9], 0)])
def test_expand_fixed_spreads_each_request_value_over_its_tokens_in_the_output_dtype(dtype, values, fill):
    """The Triton kernel's semantics: request r's value at its cu[r-1]..cu[r] tokens, replace_from -> replace_to,
    ragged counts (a request with 0 drafts writes nothing), the tail past the last count untouched."""
    out = torch.full((7,), -5, dtype=dtype)
    vllm_fix.expand_fixed(out, torch.tensor(values, dtype=dtype), torch.tensor([2, 2, 6], dtype=torch.int32),
                          0, fill, MAX_NUM_TOKENS=128)
    a, b, c = values
    b = fill if b == 0 else b
    assert out.tolist() == pytest.approx([a, a, c, c, c, c, -5])
    assert out.dtype == dtype



def test_expand_fixed_compares_with_replace_from_before_the_store_cast():
    """vLLM PR #55006's ordering (the Triton kernel's): the replace_from test runs on the input's value, then the
    store casts. A float 0.3 stored into an int buffer is 0, but it was not replace_from, so it stays 0; a cast
    before the test would have turned it into replace_to. The float input is never truncated first (the shipped
    shim's `_ensure_int64(input_val)` made 0.7 into 0 and then into replace_to)."""
    out = torch.full((3,), -5, dtype=torch.int64)
    vllm_fix.expand_fixed(out, torch.tensor([0.3, 0.0], dtype=torch.float32), torch.tensor([1, 3]), 0, 7)
    assert out.tolist() == [0, 7, 7]
    temps = torch.empty(3, dtype=torch.float32)
    vllm_fix.expand_fixed(temps, torch.tensor([0.7, 0.0], dtype=torch.float32), torch.tensor([1, 3]), 0, 1.0)
    assert temps.tolist() == pytest.approx([0.7, 1.0, 1.0])

def test_server_env_prepends_the_site_folder_and_switches_the_fix_on():
    env = vllm_fix.server_env({"PYTHONPATH": "/x", "A": "1"})
    assert env["PYTHONPATH"] == f"{vllm_fix.SITE_DIR}{os.pathsep}/x" and env[vllm_fix.ENV] == "1" and env["A"] == "1"
    assert vllm_fix.server_env({})["PYTHONPATH"] == str(vllm_fix.SITE_DIR)
    assert (vllm_fix.SITE_DIR / "sitecustomize.py").is_file()


@pytest.mark.end_to_end
def test_a_process_started_with_server_env_replaces_the_shipped_expand_override(tmp_path):
    """A Python process with server_env loads sitecustomize, which replaces
    vllm.utils.cpu_triton_utils._expand_kernel_impl (here a stand-in package) and says so on stderr; without
    the switch the module keeps its own."""
    pkg = tmp_path / "vllm" / "utils"
    pkg.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cpu_triton_utils.py").write_text("def _expand_kernel_impl(*a):\n    pass\n")
    code = "import vllm.utils.cpu_triton_utils as m; print(m._expand_kernel_impl.__module__)"
    base = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    fixed = subprocess.run([sys.executable, "-c", code], env=vllm_fix.server_env(base), capture_output=True,
                           text=True, timeout=120, check=True)
    assert fixed.stdout.strip() == "harness.adapters.vllm_fix" and vllm_fix.APPLIED in fixed.stderr
    shipped = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=120,
                             check=True)
    assert shipped.stdout.strip() == "vllm.utils.cpu_triton_utils" and vllm_fix.APPLIED not in shipped.stderr
