"""OpenVINO GenAI (`openvino-genai`, run in its own venv): LLMPipeline with `draft_model=` (method "draft") or
`prompt_lookup=True` (method "ngram"), and without either (speculation off), on the embedded SmolLM2-135M GGUF.

OpenVINO GenAI needs no torch and the project's venv has no openvino, so the engine runs in a subprocess of the
Python named by `$SPECDEC_OPENVINO_PYTHON` (a venv with `pip install openvino-genai==2026.4.1.0 numpy`):
`harness/engines/openvino_worker.py`, JSON lines on stdin / stdout, one worker per started engine, every request
bounded by `REQUEST_TIMEOUT_S`, the process closed (then terminated, then killed) on stop and at exit.

The model: the weights `--pair smollm2` dequantizes for transformers from the embedded Q4_1 GGUF, written as an
F16 GGUF (matrices float16, norms float32; OpenVINO GenAI 2026.4.1 refuses an F32 GGUF: "Unsupported quantization
type") under `$SPECDEC_CACHE/openvino/smollm2-f16` and converted once (`enable_save_ov_model=True` writes the IR
beside it; `draft_model()` needs that IR folder). Option `weights="q4_1"` loads the Q4_1 GGUF itself instead:
OpenVINO's own Q4_1 reader, whose model is not the one transformers loads (greedy differs at the first token).
Precision: INFERENCE_PRECISION_HINT and KV_CACHE_PRECISION f32 (the CPU defaults are bf16 and u8), one thread.
Options (`Setup.options`): `weights` ("f16" or "q4_1"), `prefix_caching` (bool; OpenVINO's default is on, this adapter's default off: on, a
rejected last draft crashes the request: `specdec campaign openvino_genai`), `draft_precision` ("f32", or "default":
the draft at the CPU defaults bf16 / u8 — a draft slightly unlike the target), `max_ngram_size` (prompt lookup, 3).

The §1b generate() functions below (`draft_generate`, `lookup_generate`, `off_generate`, and `_pc` variants with
prefix caching on, `weak_draft_generate` with the bf16 draft) run one worker per configuration for the process.
"""

from __future__ import annotations

import atexit
import shutil
from pathlib import Path

from harness.engines.base import Capabilities, Completion, Engine, Probe, Request, register_engine
from harness.engines.venv_worker import EngineRequestFailed, VenvWorker, dist_version, venv_probe, venv_python  # noqa: F401 - EngineRequestFailed: this module's name of it
from harness.errors import HarnessError

PYTHON_ENV = "SPECDEC_OPENVINO_PYTHON"
WORKER = Path(__file__).with_name("openvino_worker.py")
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "INFERENCE_NUM_THREADS": 1,
       "NUM_STREAMS": 1}
CPU_DEFAULTS = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1}  # bf16 inference and u8 KV cache (its defaults)
LOAD_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 300.0  # per continuation of a request
METHOD_NAMES = {None: "off", "draft": "draft", "ngram": "lookup"}


def worker_python() -> Path:
    return venv_python(PYTHON_ENV, "OpenVINO GenAI", "python3 -m venv V && V/bin/pip install openvino-genai==2026.4.1.0 numpy")


def installed_version(python: Path) -> str | None:
    return dist_version(python, "openvino_genai")


class Worker(VenvWorker):
    """One OpenVINO GenAI worker process (harness.engines.venv_worker)."""

    label = "OpenVINO GenAI"

    def __init__(self, python: Path, log: Path | None = None):
        super().__init__(python, WORKER, log)


WEIGHTS = ("f16", "q4_1")


def model_dir(weights: str = "f16") -> Path:
    """The IR folder of the embedded SmolLM2 (converted once): "f16", the Q4_1 GGUF's dequantized weights with the
    matrices as float16 (harness.models.gguf_f32); "q4_1", the embedded Q4_1 GGUF itself (OpenVINO GenAI's own
    Q4_1 reader: not the model transformers loads, `specdec campaign openvino_genai`)."""
    from harness.models.gguf_f32 import write_f32_gguf
    from harness.models.smollm2 import default_cache_dir, gguf_path, smollm2_available

    if weights not in WEIGHTS:
        raise HarnessError(f"weights {weights!r}: one of {', '.join(WEIGHTS)}")
    ok, why = smollm2_available()
    if not ok:
        raise HarnessError(why)
    folder = default_cache_dir().parent / "openvino" / f"smollm2-{weights}"
    if not (folder / "openvino_model.xml").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        if weights == "q4_1":
            shutil.copyfile(gguf_path(), folder / "model.gguf")
        else:
            write_f32_gguf(gguf_path(), folder / "model.gguf", f16_matrices=True)
        worker = Worker(worker_python())
        try:
            worker.call({"op": "convert", "gguf": str(folder / "model.gguf")}, LOAD_TIMEOUT_S)
        finally:
            worker.close()
    return folder


def _flag(value) -> bool:
    """An option as given in code (a bool) or on a command line (--engine-option prefix_caching=on)."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "on", "yes")


def _eos(pair_name: str) -> list[int]:
    from harness.adapters.hf import eos_list
    from harness.pairs import get_pair

    return eos_list(get_pair(pair_name).target)


@register_engine("openvino-genai")
class OpenVinoGenAI(Engine):
    kind = "in-process"
    capabilities = Capabilities(methods=("draft", "ngram"), returns=("ids", "text"), n=True,
                                notes="LLMPipeline with draft_model= / prompt_lookup=True, run in its own venv "
                                f"(${PYTHON_ENV}); f32 inference and KV cache (CPU defaults bf16 / u8); prefix "
                                "caching off unless options prefix_caching=True; a seed per row (rng_seed)")

    @classmethod
    def installed(cls) -> Probe:
        return venv_probe(PYTHON_ENV, "openvino_genai", "openvino-genai==2026.4.1.0")

    def start(self) -> None:
        if self.setup.pair not in ("smollm2", "smollm2-ngram"):
            raise HarnessError(f"the OpenVINO GenAI adapter runs the embedded SmolLM2 (pair smollm2), not "
                               f"{self.setup.pair!r}")
        opts = self.setup.options
        folder = model_dir(opts.get("weights", "f16"))
        log = None
        if self.setup.out is not None:
            Path(self.setup.out).mkdir(parents=True, exist_ok=True)
            log = Path(self.setup.out) / "openvino-worker.log"
        self.worker = Worker(worker_python(), log)
        self.spec = {"op": "load", "model": str(folder), "method": METHOD_NAMES[self.setup.method],
                     "draft": str(folder), "prefix_caching": _flag(opts.get("prefix_caching", False)),
                     "properties": F32,
                     "draft_properties": CPU_DEFAULTS if opts.get("draft_precision") == "default" else F32,
                     "eos_token_id": (_eos(self.setup.pair) or [-1])[0]}
        self.worker.call(self.spec, LOAD_TIMEOUT_S)
        self.eos = set(_eos(self.setup.pair))

    def stop(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            self.stop_report = worker.close()
            self.worker = None
        super().stop()

    def raw(self, request: Request, *, ignore_eos: bool = False) -> dict:
        """The worker's reply for one Request: rows and per-row errors (a crash is a row's error, not raised)."""
        body = {"op": "generate", "prompt": list(request.prompt_ids), "n": request.n,
                "max_new_tokens": request.max_new_tokens, "do_sample": request.temperature > 0,
                "temperature": request.temperature, "top_k": request.top_k, "top_p": request.top_p,
                "rng_seed": request.seed % 2**31, "num_assistant_tokens": self.setup.gamma,
                "max_ngram_size": self.setup.options.get("max_ngram_size", 3), "ignore_eos": ignore_eos}
        return self.worker.call(body, REQUEST_TIMEOUT_S * max(1, request.n))

    def generate(self, request: Request) -> Completion:
        why = self.unsupported(request)
        if why:
            raise HarnessError(f"engine {self.name} cannot honour {why}")
        reply = self.raw(request)
        bad = [e for e in reply["errors"] if e]
        if bad:
            raise EngineRequestFailed(f"OpenVINO GenAI aborted {len(bad)} of {request.n} continuations: {bad[0]}")
        rows = []
        for row in reply["rows"]:
            cut = next((i + 1 for i, t in enumerate(row) if t in self.eos), len(row))
            rows.append(row[:cut])
        return Completion(rows)


# ------------------------------------------------------------------------- §1b generate() functions

_ENGINES: dict[tuple, OpenVinoGenAI] = {}


def _engine(method: str | None, gamma: int, **options) -> OpenVinoGenAI:
    from harness.engines.base import Setup

    key = (method, gamma, tuple(sorted(options.items())))
    if key not in _ENGINES:
        for old in list(_ENGINES):  # one worker at a time: the machine's cores are shared
            _ENGINES.pop(old).stop()
        engine = OpenVinoGenAI(Setup("smollm2", method, gamma, options=options))
        try:
            engine.start()
        except BaseException:
            engine.stop()
            raise
        _ENGINES[key] = engine
    return _ENGINES[key]


@atexit.register
def _stop_all() -> None:
    for key in list(_ENGINES):
        _ENGINES.pop(key).stop()


def _generate(method, options, target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
              seed):
    from harness.engines.battery import as_generate

    del target, draft
    return as_generate(_engine(method, gamma, **options))(
        None, None, input_ids, max_new_tokens=max_new_tokens, gamma=gamma, temperature=temperature, top_k=top_k,
        top_p=top_p, seed=seed)


def _decoder(method: str | None, doc: str, **options):
    def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
        return _generate(method, options, target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    generate.__doc__ = doc
    return generate


off_generate = _decoder(None, "OpenVINO GenAI, speculation off (f32); the draft unused.")
off_generate_q41 = _decoder(None, "off_generate on OpenVINO's own reading of the Q4_1 GGUF (weights q4_1).",
                            weights="q4_1")
draft_generate = _decoder("draft", "OpenVINO GenAI draft_model(): the target's own IR as draft, f32, prefix caching "
                          "off.")
draft_generate_pc = _decoder("draft", "draft_generate with prefix caching on (OpenVINO's default).",
                             prefix_caching=True)
weak_draft_generate = _decoder("draft", "draft_model() at the CPU defaults (bf16 inference, u8 KV cache): a draft "
                               "slightly unlike the f32 target; prefix caching off.", draft_precision="default")
lookup_generate = _decoder("ngram", "OpenVINO GenAI prompt_lookup=True (max_ngram_size 3), f32, prefix caching off.")
lookup_generate_pc = _decoder("ngram", "lookup_generate with prefix caching on.", prefix_caching=True)
