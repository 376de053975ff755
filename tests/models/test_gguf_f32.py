"""harness.models.gguf_f32: the F32 GGUF llama.cpp is served is the source's tensors, dequantized, and cached."""
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from harness.models.gguf_f32 import write_f32_gguf  # noqa: E402


def _source(path, weights):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("llama.context_length", 64)
    w.add_string("general.name", "tiny")
    w.add_tensor("blk.0.w", weights.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_every_tensor_is_float32_with_the_same_values_and_the_metadata_is_kept(tmp_path):
    weights = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    _source(tmp_path / "src.gguf", weights)
    out = write_f32_gguf(tmp_path / "src.gguf", tmp_path / "f32" / "dst.gguf")
    reader = gguf.GGUFReader(str(out))
    (t,) = reader.tensors
    assert t.tensor_type == gguf.GGMLQuantizationType.F32
    np.testing.assert_array_equal(np.asarray(t.data).reshape(3, 8), weights.astype(np.float16).astype(np.float32))
    assert reader.fields["llama.context_length"].contents() == 64
    assert reader.fields["general.name"].contents() == "tiny"
    assert reader.fields["general.file_type"].contents() == int(gguf.LlamaFileType.ALL_F32)


def test_a_second_call_reuses_the_written_file(tmp_path):
    _source(tmp_path / "src.gguf", np.ones((2, 4), np.float32))
    first = write_f32_gguf(tmp_path / "src.gguf", tmp_path / "dst.gguf")
    stamp = first.stat().st_mtime_ns
    assert write_f32_gguf(tmp_path / "src.gguf", tmp_path / "dst.gguf").stat().st_mtime_ns == stamp
