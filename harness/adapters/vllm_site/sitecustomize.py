"""Loaded by every Python process of a vLLM server started with `harness.adapters.vllm_fix.server_env`."""
import os

if os.environ.get("SPECDEC_VLLM_EXPAND_FIX") == "1":
    from harness.adapters.vllm_fix import patch_module

    patch_module()
