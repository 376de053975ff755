"""The ONNX Runtime GenAI worker: run by the Python of a venv that has `onnxruntime-genai` (with onnx, torch and
transformers for its model builder) as `runpy.run_path(this file)["main"]()`, never imported by the harness. JSON lines on stdin / stdout, one reply each:

- {"op": "finish", "folder": DIR, "eos": [ids], "threads": k} -> makes a folder the builder wrote ready to load:
  the logits get one extra column, id V (the vocabulary size), whose logit is -1e30 (probability exactly 0 in
  float32 at any temperature), and id V becomes pad_token_id; eos_token_id is `eos`, or [V] when the model has none
  (ONNX Runtime GenAI stops at its EOS ids, falls back to the pad id when the list is empty and refuses an id
  outside the vocabulary: an unreachable column is the only way to run a model without an EOS); one thread;
- {"op": "compose", "target": DIR, "draft": DIR, "out": DIR} -> a folder whose genai_config.json is the target's
  with a `model.draft` block (the draft's decoder, its files linked into OUT/draft/: 0.18 refuses ".." in paths);
- {"op": "load", "model": DIR, "method": "off" | "draft" | "ngram", "gamma": G, "ngram_size": N} -> og.Model;
- {"op": "generate", "prompt": [ids], "seeds": [s x k], "max_new_tokens": N, "do_sample": bool,
   "temperature": T, "top_k": K | null, "top_p": P | null}
  -> {"rows": [[ids] x k], "errors": [str | null x k], "stats": {summed speculative counters}, "seconds": s}: one
  og.Generator per row (batch 1), seeded with `random_seed`; each row's tokens are the generator's next tokens
  step by step (EOS included: get_sequence drops it), and an exception is that row's error;
- {"op": "versions"} -> the versions and the commit of the installed onnxruntime-genai; {"op": "quit"} -> exits.
Every reply is {"ok": true, ...} or {"ok": false, "error": str}; stdout carries only replies. The worker exits when its
parent is gone, even in the middle of a request.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Run from this folder, it would be sys.path[0], and it holds the adapter harness/engines/onnxruntime_genai.py, whose
# name would shadow the engine's own package: take it off the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

UNREACHABLE_LOGIT = -1e30
STAT_KEYS = ("rounds", "draft_tokens_proposed", "draft_tokens_evaluated", "draft_tokens_accepted",
             "correction_tokens", "bonus_tokens", "ngram_lookup_hits", "ngram_lookup_misses",
             "standard_fallback_steps", "target_forward_passes")
_STATE: dict = {}


def _config_path(folder: str) -> str:
    return os.path.join(folder, "genai_config.json")


def _pad_logits(model_path: str) -> int:
    """Append the unreachable column to the `logits` output of model_path (in place); returns the new width."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(model_path, load_external_data=False)
    graph = model.graph
    out = next(o for o in graph.output if o.name == "logits")
    dims = out.type.tensor_type.shape.dim
    width = dims[-1].dim_value
    if any(n.name == "specdec_pad_concat" for n in graph.node):
        return width
    raw = "logits_before_specdec_pad"
    for node in graph.node:
        node.output[:] = [raw if o == "logits" else o for o in node.output]
    elem = out.type.tensor_type.elem_type
    nodes = [
        helper.make_node("Shape", [raw], ["specdec_pad_shape"], end=-1, name="specdec_pad_shape"),
        helper.make_node("Concat", ["specdec_pad_shape", "specdec_pad_one"], ["specdec_pad_col_shape"], axis=0,
                         name="specdec_pad_col_shape"),
        helper.make_node("ConstantOfShape", ["specdec_pad_col_shape"], ["specdec_pad_col"], name="specdec_pad_col",
                         value=helper.make_tensor("v", elem, [1], [UNREACHABLE_LOGIT])),
        helper.make_node("Concat", [raw, "specdec_pad_col"], ["logits"], axis=-1, name="specdec_pad_concat"),
    ]
    graph.initializer.append(helper.make_tensor("specdec_pad_one", TensorProto.INT64, [1], [1]))
    graph.node.extend(nodes)
    dims[-1].dim_value = width + 1
    onnx.save(model, model_path)
    return width + 1


def _finish(req: dict) -> dict:
    folder = req["folder"]
    with open(_config_path(folder)) as f:
        config = json.load(f)
    decoder = config["model"]["decoder"]
    vocab = int(config["model"]["vocab_size"])
    if not config.get("specdec_padded"):
        width = _pad_logits(os.path.join(folder, decoder["filename"]))
        if width != vocab + 1:
            raise RuntimeError(f"logits width {width} after padding, vocab_size {vocab}")
        config["model"]["vocab_size"] = vocab + 1
        config["specdec_padded"] = vocab
        vocab += 1
    unreachable = int(config["specdec_padded"])
    eos = [int(e) for e in req.get("eos") or []] or [unreachable]
    config["model"]["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    config["model"]["pad_token_id"] = unreachable
    options = decoder.setdefault("session_options", {})
    options["intra_op_num_threads"] = int(req.get("threads", 1))
    options["inter_op_num_threads"] = 1
    config["search"]["top_k"] = 0  # the builder writes 50; a request always sets its own
    with open(_config_path(folder), "w") as f:
        json.dump(config, f, indent=1)
    return {"vocab_size": vocab, "unreachable_id": unreachable, "eos": eos}


def _link_tree(src: str, dst: str) -> None:
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name == "genai_config.json" or os.path.isdir(os.path.join(src, name)):
            continue
        target = os.path.join(dst, name)
        if os.path.lexists(target):
            os.remove(target)
        try:
            os.link(os.path.join(src, name), target)
        except OSError:
            import shutil

            shutil.copyfile(os.path.join(src, name), target)


def _compose(req: dict) -> dict:
    out = req["out"]
    with open(_config_path(req["target"])) as f:
        config = json.load(f)
    with open(_config_path(req["draft"])) as f:
        draft = json.load(f)
    if draft["model"]["vocab_size"] != config["model"]["vocab_size"]:
        raise RuntimeError("target and draft vocabularies differ")
    _link_tree(req["target"], out)
    _link_tree(req["draft"], os.path.join(out, "draft"))
    block = dict(draft["model"]["decoder"])
    block["filename"] = "draft/" + block["filename"]
    config["model"]["draft"] = block
    config["speculative"] = {"max_draft_tokens": 4}
    with open(_config_path(out), "w") as f:
        json.dump(config, f, indent=1)
    return {"folder": out}


def _load(req: dict) -> dict:
    import onnxruntime_genai as og

    started = time.perf_counter()
    _STATE.clear()
    _STATE["model"] = og.Model(req["model"])
    _STATE["spec"] = req
    return {"seconds": time.perf_counter() - started}


def _speculative_options(spec: dict) -> dict | None:
    method = spec.get("method", "off")
    if method == "off":
        return None
    options = {"max_draft_tokens": int(spec["gamma"]), "min_adaptive_k": 0, "cooldown": False}
    if method == "ngram":
        options["ngram_size"] = int(spec.get("ngram_size") or 2)
    elif method != "draft":
        raise ValueError(f"unknown method {method!r}")
    return options


def _one(req: dict, seed: int, totals: dict) -> list[int]:
    import numpy as np
    import onnxruntime_genai as og

    model, spec = _STATE["model"], _STATE["spec"]
    prompt = [int(t) for t in req["prompt"]]
    params = og.GeneratorParams(model)
    search = {"max_length": len(prompt) + int(req["max_new_tokens"]), "do_sample": bool(req["do_sample"]),
              "random_seed": int(seed), "top_k": int(req.get("top_k") or 0),
              "top_p": float(1.0 if req.get("top_p") is None else req["top_p"])}
    if req["do_sample"]:
        search["temperature"] = float(req["temperature"])
    params.set_search_options(**search)
    options = _speculative_options(spec)
    if options:
        params.set_speculative_options(**options)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray(prompt, dtype=np.int32))
    row: list[int] = []
    while not generator.is_done():
        generator.generate_next_token()
        row.append(int(generator.get_next_tokens()[0]))
    if options:
        stats = generator.get_speculative_stats()
        for key in STAT_KEYS:
            totals[key] = totals.get(key, 0) + int(stats.get(key, 0))
    return row


def _generate(req: dict) -> dict:
    if "model" not in _STATE:
        raise RuntimeError("no model loaded")
    rows, errors, totals = [], [], {}
    started = time.perf_counter()
    for seed in req["seeds"]:
        try:
            rows.append(_one(req, seed, totals))
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - the engine's refusal is the measurement
            rows.append([])
            errors.append(f"{type(exc).__name__}: {str(exc).strip()[:400]}")
    return {"rows": rows, "errors": errors, "stats": totals, "seconds": time.perf_counter() - started}


def _versions() -> dict:
    import onnxruntime
    import onnxruntime_genai as og

    return {"onnxruntime_genai": og.__version__, "commit": getattr(og, "__commit__", None),
            "onnxruntime": onnxruntime.__version__}


HANDLERS = {"finish": _finish, "compose": _compose, "load": _load, "generate": _generate,
            "versions": lambda req: _versions()}


def _exit_with_parent() -> None:
    """A daemon thread: the worker ends when the process that started it is gone (even mid-request)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    _exit_with_parent()
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
            handler = HANDLERS.get(req.get("op"))
            if handler is None:
                raise ValueError(f"unknown op {req.get('op')!r}")
            reply = {"ok": True, **handler(req)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back as one line
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


