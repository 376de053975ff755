"""ONNX Runtime GenAI (`onnxruntime-genai`, run in its own venv): og.Generator with a draft model (a `model.draft`
block in genai_config.json: method "draft"), n-gram lookup (`ngram_size`: method "ngram") or neither (speculation
off), on ONNX models its own builder makes from the very weights the harness's ground truth loads.

The project's venv has no onnxruntime-genai, so the engine runs in a subprocess of the Python named by
`$SPECDEC_ORT_GENAI_PYTHON` (a venv with `pip install onnxruntime-genai==0.18.0 'onnxruntime>=1.31' numpy` and, for
the builder, torch transformers onnx onnx_ir): `harness/engines/onnxruntime_genai_worker.py`, JSON lines on stdin /
stdout, one worker at a time, every request bounded (`REQUEST_TIMEOUT_S` per row), the process closed (then
terminated, then killed) on stop and at exit.

The models (`build`): the target (and the draft) are saved as Hugging Face folders and converted by
`python -m onnxruntime_genai.models.builder -p fp32 -e cpu` (int8 for the `int8` draft: ONNX Runtime's own
weight-only quantization of the target), cached under `$SPECDEC_CACHE/onnxruntime-genai/<sha256 of the weights>`.
The builder needs a tokenizer file and an EOS id: a model without a tokenizer (the toy pairs: ids are the text) gets
a word-level stand-in with one word per id, never used (requests are ids). Every ONNX model then gets one extra
logits column, id V, at -1e30 (probability exactly 0), which is its pad id and, for a model without EOS, its EOS
(the worker's docstring says why). One thread per session.
Options (`Setup.options`): `draft` ("pair": the pair's own draft model, default for pairs whose draft is a plain
transformers model; "int8": the target quantized by the builder, default for the SmolLM2 pairs), `ngram_size`
(default 2: the lookup matches the last token, so that short toy contexts hit).

Batch 1: a request of n rows is n generators, seeds s, s+1, ... The §1b generate() functions below
(`draft_generate`, `int8_draft_generate`, `ngram_generate`, `off_generate`) build from the target / draft they are
handed and keep one worker per configuration for the process (the speculation counters of the last calls:
`last_stats()`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import subprocess
from pathlib import Path

from harness.engines.base import Capabilities, Completion, Engine, Probe, Request, register_engine
from harness.engines.venv_worker import EngineRequestFailed, VenvWorker, dist_version, venv_probe, venv_python  # noqa: F401 - EngineRequestFailed: this module's name of it
from harness.errors import HarnessError

PYTHON_ENV = "SPECDEC_ORT_GENAI_PYTHON"
WORKER = Path(__file__).with_name("onnxruntime_genai_worker.py")
INSTALL = ("python3 -m venv V && V/bin/pip install onnxruntime-genai==0.18.0 'onnxruntime>=1.31' numpy "
           "torch==2.13.0 transformers onnx onnx_ir")
BUILD_TIMEOUT_S = 1800.0
LOAD_TIMEOUT_S = 600.0
REQUEST_TIMEOUT_S = 120.0  # per row of a request
METHODS = {None: "off", "draft": "draft", "ngram": "ngram"}
DEFAULT_NGRAM_SIZE = 2


def worker_python() -> Path:
    return venv_python(PYTHON_ENV, "ONNX Runtime GenAI", INSTALL)


def installed_version(python: Path) -> str | None:
    return dist_version(python, "onnxruntime_genai")


class Worker(VenvWorker):
    """One ONNX Runtime GenAI worker process (harness.engines.venv_worker)."""

    label = "ONNX Runtime GenAI"

    def __init__(self, python: Path, log: Path | None = None):
        super().__init__(python, WORKER, log)


# ------------------------------------------------------------------------------------------------- models


def cache_root() -> Path:
    from harness.models.smollm2 import default_cache_dir

    return default_cache_dir().parent / "onnxruntime-genai"


_DIGESTS: dict[int, tuple] = {}  # id(model) -> (weak reference, digest): hashing SmolLM2 takes seconds


def _weights_digest(model) -> str:
    import weakref

    cached = _DIGESTS.get(id(model))
    if cached is not None and cached[0]() is model:
        return cached[1]
    digest = _digest(model)
    _DIGESTS[id(model)] = (weakref.ref(model), digest)
    return digest


def _digest(model) -> str:
    import torch

    h = hashlib.sha256(json.dumps(model.config.to_diff_dict(), sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _stand_in_tokenizer(vocab: int):
    """A word-level tokenizer with one word per id (t0, t1, ...): the builder requires one; never used."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def _save_hf(model, tokenizer, vocab: int, folder: Path) -> None:
    import copy

    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to(torch.float32)
    if model.config.eos_token_id is None:  # the builder insists on one; the worker replaces it (`finish`)
        model.config.eos_token_id = 0
    model.save_pretrained(folder)
    (tokenizer if tokenizer is not None else _stand_in_tokenizer(vocab)).save_pretrained(folder)


def _run_builder(python: Path, hf: Path, out: Path, precision: str, log: Path) -> None:
    argv = [str(python), "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out), "-p", precision,
            "-e", "cpu", "-c", str(out.parent / "builder-cache")]
    with open(log, "a") as f:
        f.write(" ".join(argv) + "\n")
        f.flush()
        try:
            done = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"the ONNX Runtime GenAI builder ran over {BUILD_TIMEOUT_S:.0f} s ({log})") from None
    if done.returncode != 0 or not (out / "genai_config.json").is_file():
        tail = log.read_text().strip().splitlines()[-1:] or ["?"]
        raise HarnessError(f"the ONNX Runtime GenAI builder could not convert {hf} (exit {done.returncode}): "
                           f"{tail[0][:300]} (log: {log})")


def build(target, draft=None, *, tokenizer=None, vocab: int | None = None, draft_kind: str = "pair") -> dict:
    """The ONNX folders of `target` (and of a draft: the model `draft` when draft_kind is "pair", the target at int8
    when "int8", none when draft is None and draft_kind "pair"): {"target": DIR, "draft": DIR | None, "spec": DIR |
    None (target + model.draft)}; built once per weights, cached."""
    from harness.adapters.hf import eos_list

    python = worker_python()
    vocab = int(vocab or target.get_output_embeddings().weight.shape[0])
    eos = eos_list(target)
    key = _weights_digest(target)
    if draft_kind == "pair" and draft is not None:
        key += "-" + _weights_digest(draft)
    elif draft_kind == "int8":
        key += "-int8"
    folder = cache_root() / key
    ready = folder / "ready.json"
    if ready.is_file():
        return json.loads(ready.read_text())["folders"]
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "build.log"
    _save_hf(target, tokenizer, vocab, folder / "target-hf")
    _run_builder(python, folder / "target-hf", folder / "target", "fp32", log)
    draft_dir = None
    if draft_kind == "int8":
        _run_builder(python, folder / "target-hf", folder / "draft", "int8", log)
        draft_dir = folder / "draft"
    elif draft is not None:
        _save_hf(draft, tokenizer, vocab, folder / "draft-hf")
        _run_builder(python, folder / "draft-hf", folder / "draft", "fp32", log)
        draft_dir = folder / "draft"
    worker = Worker(python, log)
    try:
        for sub in (folder / "target", draft_dir):
            if sub is not None:
                worker.call({"op": "finish", "folder": str(sub), "eos": eos, "threads": 1}, LOAD_TIMEOUT_S)
        if draft_dir is not None:
            worker.call({"op": "compose", "target": str(folder / "target"), "draft": str(draft_dir),
                         "out": str(folder / "spec")}, LOAD_TIMEOUT_S)
        versions = worker.call({"op": "versions"}, LOAD_TIMEOUT_S)
    finally:
        worker.close()
    folders = {"target": str(folder / "target"), "draft": None if draft_dir is None else str(draft_dir),
               "spec": None if draft_dir is None else str(folder / "spec")}
    versions.pop("ok", None)
    ready.write_text(json.dumps({"folders": folders, "versions": versions, "eos": eos, "vocab": vocab}, indent=1))
    return folders


def _default_draft_kind(pair_name: str) -> str:
    return "int8" if pair_name.startswith("smollm2") else "pair"


# ------------------------------------------------------------------------------------------------- engine


@register_engine("onnxruntime-genai")
class OnnxRuntimeGenAI(Engine):
    kind = "in-process"
    capabilities = Capabilities(methods=("draft", "ngram"), returns=("ids",), n=True,
                                notes=f"og.Generator, batch 1 (n rows: n generators, seeds s, s+1, ...), in its own venv (${PYTHON_ENV}); models built by "
                                "onnxruntime_genai.models.builder at fp32 (the SmolLM2 draft: its int8 build); a "
                                "draft model is a model.draft block; n-gram ngram_size 2; a seed per row "
                                "(random_seed); MTP needs a checkpoint with an MTP head (none here)")

    @classmethod
    def installed(cls) -> Probe:
        return venv_probe(PYTHON_ENV, "onnxruntime_genai", "onnxruntime-genai==0.18.0")

    def start(self) -> None:
        from harness.adapters.hf import eos_list
        from harness.pairs import get_pair

        pair = get_pair(self.setup.pair)
        kind = self.setup.options.get("draft", _default_draft_kind(self.setup.pair))
        folders = build(pair.target, pair.draft if self.setup.method == "draft" and kind == "pair" else None,
                        tokenizer=pair.tokenizer, vocab=pair.vocab_size,
                        draft_kind=kind if self.setup.method == "draft" else "pair")
        log = None
        if self.setup.out is not None:
            Path(self.setup.out).mkdir(parents=True, exist_ok=True)
            log = Path(self.setup.out) / "onnxruntime-genai-worker.log"
        self.worker = Worker(worker_python(), log)
        self.eos = set(eos_list(pair.target))
        self.stats: dict = {}
        model = folders["spec"] if self.setup.method == "draft" else folders["target"]
        self.worker.call({"op": "load", "model": model, "method": METHODS[self.setup.method],
                          "gamma": self.setup.gamma,
                          "ngram_size": int(self.setup.options.get("ngram_size", DEFAULT_NGRAM_SIZE))},
                         LOAD_TIMEOUT_S)

    def stop(self) -> None:
        worker = getattr(self, "worker", None)
        if worker is not None:
            self.stop_report = worker.close()
            self.worker = None
        super().stop()

    def raw(self, request: Request) -> dict:
        """The worker's reply for one Request: rows, per-row errors and the summed speculation counters."""
        body = {"op": "generate", "prompt": list(request.prompt_ids),
                "seeds": [(request.seed + k) % 2**31 for k in range(request.n)],
                "max_new_tokens": request.max_new_tokens, "do_sample": request.temperature > 0,
                "temperature": request.temperature, "top_k": request.top_k, "top_p": request.top_p}
        reply = self.worker.call(body, REQUEST_TIMEOUT_S * max(1, request.n))
        for key, value in reply.get("stats", {}).items():
            self.stats[key] = self.stats.get(key, 0) + value
        return reply

    def generate(self, request: Request) -> Completion:
        why = self.unsupported(request)
        if why:
            raise HarnessError(f"engine {self.name} cannot honour {why}")
        reply = self.raw(request)
        bad = [e for e in reply["errors"] if e]
        if bad:
            raise EngineRequestFailed(f"ONNX Runtime GenAI aborted {len(bad)} of {request.n} rows: {bad[0]}")
        rows = []
        for row in reply["rows"]:
            cut = next((i + 1 for i, t in enumerate(row) if t in self.eos), len(row))
            rows.append(row[:cut])
        return Completion(rows)


# ------------------------------------------------------------------------- §1b generate() functions

_RUNNING: dict = {}  # the one worker of the §1b functions: {"key": ..., "worker": Worker, "eos": set, "stats": {}}


def _stop_running() -> None:
    worker = _RUNNING.pop("worker", None)
    _RUNNING.clear()
    if worker is not None:
        worker.close()


atexit.register(_stop_running)


def last_stats() -> dict:
    """The speculation counters summed over the §1b calls since the current worker was loaded."""
    return dict(_RUNNING.get("stats", {}))


def _worker_for(target, draft, method: str | None, draft_kind: str, gamma: int, ngram_size: int):
    from harness.adapters.hf import eos_list

    folders = build(target, draft if method == "draft" and draft_kind == "pair" else None,
                    draft_kind=draft_kind if method == "draft" else "pair")
    model = folders["spec"] if method == "draft" else folders["target"]
    key = (model, method, gamma, ngram_size)
    if _RUNNING.get("key") != key:
        _stop_running()
        worker = Worker(worker_python())
        try:
            worker.call({"op": "load", "model": model, "method": METHODS[method], "gamma": gamma,
                         "ngram_size": ngram_size}, LOAD_TIMEOUT_S)
        except BaseException:
            worker.close()
            raise
        _RUNNING.update(key=key, worker=worker, eos=set(eos_list(target)), stats={})
    return _RUNNING


def _generate(method, draft_kind, target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p,
              seed, ngram_size=DEFAULT_NGRAM_SIZE):
    import torch

    from harness.adapters.loading import pad_rows

    running = _worker_for(target, draft, method, draft_kind, gamma, ngram_size)
    rows = []
    for b, prompt in enumerate(input_ids.tolist()):
        body = {"op": "generate", "prompt": prompt, "seeds": [(seed * 1_000_003 + b) % 2**31],
                "max_new_tokens": max_new_tokens, "do_sample": temperature > 0, "temperature": temperature,
                "top_k": top_k or None, "top_p": top_p if top_p not in (None, 1.0) else None}
        reply = running["worker"].call(body, REQUEST_TIMEOUT_S)
        if reply["errors"][0]:
            raise EngineRequestFailed(f"ONNX Runtime GenAI aborted a row: {reply['errors'][0]}")
        for key, value in reply["stats"].items():
            running["stats"][key] = running["stats"].get(key, 0) + value
        row = reply["rows"][0]
        cut = next((i + 1 for i, t in enumerate(row) if t in running["eos"]), len(row))
        rows.append(torch.tensor(row[:cut][:max_new_tokens], dtype=torch.long))
    return pad_rows(rows)


def _decoder(method: str | None, draft_kind: str, doc: str):
    def generate(target, draft, input_ids, *, max_new_tokens, gamma, temperature, top_k, top_p, seed):
        return _generate(method, draft_kind, target, draft, input_ids, max_new_tokens=max_new_tokens, gamma=gamma,
                         temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    generate.__doc__ = doc
    return generate


off_generate = _decoder(None, "pair", "ONNX Runtime GenAI without speculation (the target's fp32 build); the draft "
                        "unused.")
draft_generate = _decoder("draft", "pair", "ONNX Runtime GenAI with the pair's draft as model.draft (both fp32), γ "
                          "drafted tokens per round (max_draft_tokens, fixed).")
int8_draft_generate = _decoder("draft", "int8", "ONNX Runtime GenAI with the builder's int8 copy of the target as "
                               "model.draft; the pair's draft unused.")
ngram_generate = _decoder("ngram", "pair", "ONNX Runtime GenAI n-gram lookup (ngram_size 2, max_draft_tokens γ); "
                          "the draft unused.")
