"""The OpenVINO GenAI worker: run by the Python of a venv that has `openvino-genai` (and no torch), never
imported by the harness: `python -c "import runpy, sys; sys.exit(runpy.run_path(sys.argv[1])['main']())" THIS_FILE`
(harness.engines.openvino_genai.Worker; no `__main__` block in the harness, tests/test_layout.py). It speaks JSON lines on stdin / stdout, one reply per request:

- {"op": "convert", "gguf": PATH} -> writes the IR folder beside the GGUF (`enable_save_ov_model`), {"ir": DIR};
- {"op": "load", "model": DIR, "method": "off" | "draft" | "lookup", "draft": DIR, "prefix_caching": bool,
   "properties": {...}, "draft_properties": {...}} -> builds the pipeline (the previous one is dropped);
- {"op": "generate", "prompt": [ids], "n": k, "max_new_tokens": N, "do_sample": bool, "temperature": T,
   "top_k": K | null, "top_p": P | null, "rng_seed": S, "num_assistant_tokens": G | null,
   "max_ngram_size": M | null, "ignore_eos": bool}
  -> {"rows": [[ids] x k], "errors": [str | null x k], "seconds": s, "pipelines_kept": i, "pipelines_rebuilt": j}:
  k requests, seeds S, S + 1, ...; a request the engine refuses (an exception, e.g. the prefix-caching assertion)
  is recorded in `errors`, its row empty; then the pipeline is kept if a one-token greedy request still runs on it,
  else built again (`pipelines_kept` / `pipelines_rebuilt` count which);
- {"op": "version"} -> the versions; {"op": "quit"} -> exits.
Every reply is {"ok": true, ...} or {"ok": false, "error": str}. stdout carries only replies (the engine's own
prints go to stderr).
"""

from __future__ import annotations

import json
import os
import sys
import time

# Should this folder be on sys.path (run as a script), its adapter harness/engines/openvino_genai.py would shadow the
# engine's own package: take it off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

_STATE: dict = {}


def _pipeline(spec: dict):
    import openvino_genai as ov_genai

    scheduler = ov_genai.SchedulerConfig()
    scheduler.enable_prefix_caching = bool(spec.get("prefix_caching", True))
    scheduler.cache_size = int(spec.get("cache_size_gb", 1))
    kw = dict(spec.get("properties", {}))
    method = spec.get("method", "off")
    if method == "draft":
        kw["draft_model"] = ov_genai.draft_model(spec["draft"], "CPU", **spec.get("draft_properties", {}))
    elif method == "lookup":
        kw["prompt_lookup"] = True
    elif method != "off":
        raise ValueError(f"unknown method {method!r}")
    return ov_genai.LLMPipeline(spec["model"], "CPU", scheduler_config=scheduler, **kw)


def _config(req: dict, method: str, seed: int):
    import openvino_genai as ov_genai

    cfg = ov_genai.GenerationConfig()
    cfg.max_new_tokens = int(req["max_new_tokens"])
    cfg.do_sample = bool(req.get("do_sample", False))
    cfg.ignore_eos = bool(req.get("ignore_eos", False))
    eos = _STATE.get("eos")
    if eos is not None and eos >= 0:
        cfg.set_eos_token_id(eos)
    if cfg.do_sample:
        cfg.temperature = float(req["temperature"])
        if req.get("top_k"):
            cfg.top_k = int(req["top_k"])
        if req.get("top_p") is not None:
            cfg.top_p = float(req["top_p"])
        cfg.rng_seed = int(seed)
    if method == "draft":
        cfg.num_assistant_tokens = int(req.get("num_assistant_tokens") or 5)
    elif method == "lookup":
        cfg.num_assistant_tokens = int(req.get("num_assistant_tokens") or 5)
        cfg.max_ngram_size = int(req.get("max_ngram_size") or 3)
    return cfg


def _recover(ids) -> None:
    """After an aborted request: keep the pipeline if a one-token greedy request still runs on it, else build it
    again (an aborted request can leave it unusable)."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    cfg = ov_genai.GenerationConfig()
    cfg.max_new_tokens = 1
    try:
        _STATE["pipe"].generate(ov_genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), cfg)
        _STATE["recovered"] = _STATE.get("recovered", 0) + 1
    except Exception:  # noqa: BLE001 - unusable: a fresh pipeline
        _STATE["pipe"] = None
        _STATE["pipe"] = _pipeline(_STATE["spec"])
        _STATE["rebuilt"] = _STATE.get("rebuilt", 0) + 1


def _generate(req: dict) -> dict:
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai

    spec = _STATE["spec"]
    ids = np.asarray([req["prompt"]], dtype=np.int64)
    rows, errors = [], []
    started = time.perf_counter()
    for k in range(int(req.get("n", 1))):
        cfg = _config(req, spec.get("method", "off"), int(req.get("rng_seed", 0)) + k)
        try:
            inputs = ov_genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))
            out = _STATE["pipe"].generate(inputs, cfg)
            rows.append([int(t) for t in out.tokens[0]])
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - the engine's refusal is the measurement
            rows.append([])
            errors.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:400]}")
            _recover(ids)
    return {"rows": rows, "errors": errors, "seconds": time.perf_counter() - started,
            "pipelines_kept": _STATE.pop("recovered", 0), "pipelines_rebuilt": _STATE.pop("rebuilt", 0)}


def _handle(req: dict) -> dict:
    op = req.get("op")
    if op == "version":
        import openvino
        import openvino_genai

        return {"openvino_genai": openvino_genai.__version__, "openvino": openvino.__version__}
    if op == "convert":
        import openvino_genai as ov_genai

        gguf = req["gguf"]
        ov_genai.LLMPipeline(gguf, "CPU", enable_save_ov_model=True)
        return {"ir": os.path.dirname(os.path.abspath(gguf))}
    if op == "load":
        _STATE["pipe"] = None
        _STATE["spec"] = req
        _STATE["eos"] = req.get("eos_token_id")
        started = time.perf_counter()
        _STATE["pipe"] = _pipeline(req)
        return {"seconds": time.perf_counter() - started}
    if op == "generate":
        if _STATE.get("pipe") is None:
            raise RuntimeError("no pipeline loaded")
        return _generate(req)
    raise ValueError(f"unknown op {op!r}")


def _exit_with_parent(parent: int) -> None:
    """End this process when the one that started it is gone (killed without closing us: no orphan keeps the CPU)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(2.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    _exit_with_parent(os.getppid())
    out = sys.stdout
    sys.stdout = sys.stderr  # anything the engine prints stays off the reply channel
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                out.write(json.dumps({"ok": True}) + "\n")
                out.flush()
                return 0
            reply = {"ok": True, **_handle(req)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back as one line
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0

