"""Engines registered with their capabilities and installed() only: no adapter onto the interface runs them yet.

Each says why (`not_runnable_why`); `start()` raises, so the battery lists their cells as "not run", never as run.
vLLM CPU, llama-server and llama-cpp-python are run today by their own campaigns (`specdec campaign vllm_cpu`,
`llama_server`, `llamacpp`), whose findings pages hold their verdicts. OpenVINO GenAI and ONNX Runtime GenAI are
replaced by their adapter modules (harness.engines.openvino_genai / onnxruntime_genai) wherever those exist.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from harness.engines.base import Capabilities, Engine, Probe, register_engine

_OWN_CAMPAIGN = ("run by its own campaign ({}); its adapter onto the engine interface is not written yet, so the "
                 "generic battery does not run it")


def _distribution(dist: str, module: str, hint: str) -> Probe:
    if importlib.util.find_spec(module) is None:
        return Probe(False, f"{dist} is not installed in this Python ({hint})")
    try:
        return Probe(True, "", metadata.version(dist))
    except metadata.PackageNotFoundError:
        return Probe(True, f"module {module} found, distribution {dist} not", None)


@register_engine("vllm-cpu")
class VllmCpu(Engine):
    kind = "server"
    runnable = False
    not_runnable_why = _OWN_CAMPAIGN.format("specdec campaign vllm_cpu")
    capabilities = Capabilities(methods=("draft", "ngram", "eagle"), levels=("engine",),
                                returns=("ids", "text", "logprobs", "scores"), n=True, streams=True,
                                notes="vLLM's CPU build (vllm-cpu); MTP not tried on CPU here")

    @classmethod
    def installed(cls) -> Probe:
        for dist in ("vllm-cpu", "vllm"):
            try:
                return Probe(True, "", f"{dist} {metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                continue
        return Probe(False, "vLLM is not installed in this Python (`nox -s vllm` builds a venv with vllm-cpu; "
                     "its campaign takes --python)")


@register_engine("llama-server")
class LlamaServer(Engine):
    kind = "server"
    api = "llama-server"
    runnable = False
    not_runnable_why = _OWN_CAMPAIGN.format("specdec campaign llama_server")
    capabilities = Capabilities(methods=("draft",), levels=("engine",), returns=("ids", "text", "logprobs"),
                                streams=True, notes="llama.cpp's server; its sampler defaults truncate (top-k 40, "
                                "top-p 0.95, min-p 0.05): requests must switch them off")

    @classmethod
    def installed(cls) -> Probe:
        from harness.errors import HarnessError
        from harness.served.llama_server import find_binary, version

        try:
            binary = find_binary()
        except HarnessError as exc:
            return Probe(False, str(exc))
        if binary is None:
            return Probe(False, "no llama-server binary ($SPECDEC_LLAMA_SERVER, or `specdec campaign llama_server` "
                         "builds it from the llama-cpp-python sdist)")
        try:
            return Probe(True, str(binary), version(binary))
        except Exception as exc:
            return Probe(False, f"{binary} --version failed: {exc}")


@register_engine("llama-cpp-python")
class LlamaCppPython(Engine):
    kind = "server"
    api = "llama-cpp-python"
    runnable = False
    not_runnable_why = _OWN_CAMPAIGN.format("specdec campaign llamacpp")
    capabilities = Capabilities(methods=("ngram",), levels=("generation", "engine"),
                                returns=("text", "logprobs", "scores"), streams=True,
                                notes="prompt-lookup decoding (LlamaPromptLookupDecoding); text pieces, no token ids; "
                                "sampler order top-k, top-p, min-p, then temperature")

    @classmethod
    def installed(cls) -> Probe:
        return _distribution("llama-cpp-python", "llama_cpp", "`nox -s engines` builds it")


@register_engine("sglang")
class SGLang(Engine):
    kind = "server"
    runnable = False
    not_runnable_why = ("not installable on this CPU machine: SGLang's registry wheels (0.5.23) are CUDA only and "
                        "its CPU kernels have no wheel; read, not run (its findings page)")
    capabilities = Capabilities(methods=("draft", "ngram", "eagle", "mtp"), levels=("engine",),
                                returns=("ids", "text", "logprobs"), n=True, streams=True,
                                notes="on CPU its verification is greedy by design (_verify_uses_greedy): temperature "
                                "and top-p are ignored under speculation (cf. sglang PR #27862, #32922 for ROCm)")

    @classmethod
    def installed(cls) -> Probe:
        probe = _distribution("sglang", "sglang", "its wheels are CUDA only; no CPU wheel")
        return probe if probe.installed else Probe(False, "not installable here: SGLang's registry wheels are CUDA "
                                                   "only, and its CPU kernels (sgl-kernel CPU) have no wheel")


@register_engine("openvino-genai")
class OpenVinoGenAI(Engine):
    runnable = False
    not_runnable_why = "its adapter (harness/engines/openvino_genai.py) has not landed"
    capabilities = Capabilities(methods=("draft", "ngram"), returns=("ids", "text"),
                                notes="LLMPipeline with draft_model= / prompt_lookup=True; CPU defaults bf16 inference "
                                "and u8 KV cache (set both to f32 to compare with a float32 reference)")

    @classmethod
    def installed(cls) -> Probe:
        return _distribution("openvino-genai", "openvino_genai", "pip install openvino-genai==2026.4.1.0")


@register_engine("onnxruntime-genai")
class OnnxRuntimeGenAI(Engine):
    runnable = False
    not_runnable_why = "its adapter (harness/engines/onnxruntime_genai.py) has not landed"
    capabilities = Capabilities(methods=("draft", "ngram", "mtp"), returns=("ids", "text"),
                                notes="batch 1; a draft model is a model.draft block of genai_config.json; models "
                                "built by onnxruntime_genai.models.builder")

    @classmethod
    def installed(cls) -> Probe:
        return _distribution("onnxruntime-genai", "onnxruntime_genai", "pip install onnxruntime-genai==0.18.0")
