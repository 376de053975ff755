"""harness.models.gguf_convert: llama.cpp's converter run with the WordPiece vocabulary t0 … t{V−1} written in place of
its own, and tiny_arch.wordpiece_tokenizer, the same words on the transformers side."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.models.gguf_convert import convert
from harness.models.tiny_arch import wordpiece_tokenizer


def test_wordpiece_tokenizer_maps_word_ti_to_id_i():
    tok = wordpiece_tokenizer(48)
    assert tok("t1 t2 t3 t47", add_special_tokens=False).input_ids == [1, 2, 3, 47]
    assert tok.decode([5, 9, 0]) == "t5 t9 t0"


def _fake_llama_cpp(root: Path) -> Path:
    """A converter tree whose model class writes its vocabulary through set_vocab (which convert must replace) and
    fails when the real one is called; the fake gguf writer dumps what it was given as JSON."""
    (root / "conversion").mkdir(parents=True)
    (root / "gguf-py" / "gguf").mkdir(parents=True)
    (root / "gguf-py" / "gguf" / "__init__.py").write_text("class TokenType:\n    NORMAL = 1\n")
    (root / "conversion" / "__init__.py").write_text(textwrap.dedent("""
        import json

        class Writer:
            def __init__(self):
                self.kv = {}
            def __getattr__(self, name):
                return lambda value: self.kv.__setitem__(name, value)

        class Model:
            hparams = {"vocab_size": 4}
            def __init__(self):
                self.gguf_writer = Writer()
            def set_vocab(self):
                raise RuntimeError("the converter's own vocabulary: needs a tokenizer")

        def get_model_class(name, mmproj=False):
            return Model
    """))
    (root / "convert_hf_to_gguf.py").write_text(textwrap.dedent("""
        import json, sys
        from conversion import get_model_class
        model = get_model_class("X")()
        model.set_vocab()
        out = sys.argv[sys.argv.index("--outfile") + 1]
        open(out, "w").write(json.dumps({"argv": sys.argv[1:], **model.gguf_writer.kv}))
    """))
    return root


def test_convert_replaces_every_vocabulary_by_the_wordpiece_words(tmp_path):
    llama_cpp = _fake_llama_cpp(tmp_path / "llama.cpp")
    out = convert(llama_cpp, tmp_path / "model", tmp_path / "m.gguf", extra=("--no-mtp",))
    written = json.loads(out.read_text())
    assert written["add_tokenizer_model"] == "bert"
    assert written["add_token_list"] == ["t0", "t1", "t2", "t3"] and written["add_token_types"] == [1] * 4
    assert written["add_unk_token_id"] == 0
    assert written["add_add_bos_token"] is False and written["add_add_eos_token"] is False
    assert written["argv"] == [str(tmp_path / "model"), "--outtype", "f32", "--outfile", str(out), "--no-mtp"]


def test_a_converter_that_fails_or_is_missing_is_a_harness_error_naming_it(tmp_path):
    with pytest.raises(HarnessError, match="no llama.cpp converter"):
        convert(tmp_path, tmp_path / "model", tmp_path / "m.gguf")
    llama_cpp = _fake_llama_cpp(tmp_path / "llama.cpp")
    (llama_cpp / "convert_hf_to_gguf.py").write_text("raise SystemExit('Architecture Foo not supported!')\n")
    with pytest.raises(HarnessError, match="exit 1.*Architecture Foo not supported"):
        convert(llama_cpp, tmp_path / "model", tmp_path / "m.gguf")


def test_the_vendored_converter_writes_a_tiny_conv_hybrid_with_the_wordpiece_vocabulary(tmp_path):
    """The real converter (where `nox -s engines` unpacked it) on arch-conv (LFM2): architecture and vocabulary."""
    from harness.served.llama_server import cache_root

    llama_cpp = cache_root() / "llama.cpp"
    if not (llama_cpp / "convert_hf_to_gguf.py").is_file():
        pytest.skip("no vendored llama.cpp converter (nox -s engines unpacks it)")
    import sys

    from harness.models.tiny_arch import save_pair
    from harness.pairs import get_pair

    target, _draft = save_pair(get_pair("arch-conv"), tmp_path, tokenizer=True)
    out = convert(llama_cpp, Path(target), tmp_path / "t.gguf")
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    try:
        import gguf
    finally:
        sys.path.remove(str(llama_cpp / "gguf-py"))
    reader = gguf.GGUFReader(str(out))
    assert reader.fields["general.architecture"].contents() == "lfm2"
    assert reader.fields["tokenizer.ggml.model"].contents() == "bert"
    assert reader.fields["tokenizer.ggml.tokens"].contents() == [f"t{i}" for i in range(48)]
