"""A transformers checkpoint folder (e.g. a tiny pair saved by harness.models.tiny_arch.save_pair) as an F32 GGUF for
llama.cpp, written by llama.cpp's own converter with a vocabulary that matches the folder's WordPiece tokenizer.

`convert(llama_cpp, folder, out)` runs the vendored `convert_hf_to_gguf.py` of the llama.cpp source tree `llama_cpp`
(in a subprocess that runs `run_converter`) with every model class's `set_vocab` replaced by one that writes
a WordPiece ("bert") vocabulary t0 … t{V−1}, all NORMAL, unknown = 0, no BOS / EOS / SEP added: the words of
`tiny_arch.wordpiece_tokenizer`, so that the server and the local model tokenize alike. Why not the converter's own
vocabulary: for a folder without a tokenizer it embeds (Mamba2) the first V tokens of GPT-NeoX's vocabulary, where
id 0 is `<|endoftext|>` (an end-of-generation token llama-server stops on or masks: the law changes), or it demands
a tokenizer (LFM2, Jamba), and for a tokenizer it does not know (by the hash of its pre-tokenizer) it refuses.
Everything else (the architecture's hyper-parameters and tensors) is the converter's, unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.errors import HarnessError


def convert(llama_cpp: Path, folder: Path, out: Path, *, extra: tuple[str, ...] = (), log=None) -> Path:
    """Write `out` (F32) from the checkpoint `folder` with `llama_cpp`'s converter (`extra`: its flags, e.g.
    --no-mtp); HarnessError naming the converter's last line when it fails."""
    script = Path(llama_cpp) / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise HarnessError(f"no llama.cpp converter at {script}")
    root = str(Path(__file__).resolve().parents[2])  # the project: the subprocess imports this module from it
    entry = f"import sys; sys.path.insert(0, {root!r}); from harness.models.gguf_convert import run_converter; " \
            "run_converter(sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", entry, str(llama_cpp), str(folder), "--outtype", "f32", "--outfile",
                           str(out), *extra], capture_output=True, text=True)
    if log is not None:
        log.write(done.stdout + done.stderr)
    if done.returncode != 0 or not Path(out).is_file():
        last = next((ln for ln in reversed((done.stderr or done.stdout).splitlines()) if ln.strip()), "no output")
        raise HarnessError(f"convert_hf_to_gguf.py failed on {folder} (exit {done.returncode}): {last.strip()[:300]}")
    return Path(out)


def run_converter(argv: list[str]) -> None:
    """The subprocess `convert` starts: argv = LLAMA_CPP FOLDER [the converter's flags]."""
    import runpy

    llama_cpp, rest = argv[0], argv[1:]
    script = f"{llama_cpp}/convert_hf_to_gguf.py"
    sys.argv = [script, *rest]
    sys.path[:0] = [llama_cpp, f"{llama_cpp}/gguf-py"]
    import conversion  # the converter's package (llama.cpp/conversion)
    import gguf

    def set_vocab(self):
        n = int(self.hparams["vocab_size"])
        self.gguf_writer.add_tokenizer_model("bert")
        self.gguf_writer.add_token_list([f"t{i}" for i in range(n)])
        self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
        self.gguf_writer.add_unk_token_id(0)
        self.gguf_writer.add_add_bos_token(False)
        self.gguf_writer.add_add_eos_token(False)
        self.gguf_writer.add_add_sep_token(False)

    found = conversion.get_model_class

    def get_model_class(name, mmproj=False):
        cls = found(name, mmproj=mmproj)
        cls.set_vocab = set_vocab
        return cls

    conversion.get_model_class = get_model_class  # the script imports it from the package when it runs
    runpy.run_path(script, run_name="__main__")
