"""The embedded SmolLM2 as GGUF files for llama.cpp: the target as an F32 GGUF written from the
dequantized weights of the embedded Q4_1 GGUF (`write_f32_gguf`, the `gguf` package: the same tensors and
metadata, every tensor dequantized to float32, i.e. the very weights `harness.models.smollm2` serves to
transformers), the embedded Q4_1 GGUF itself as the draft. Used by llama-server (harness.served) and
llama-cpp-python (harness.adapters.llamacpp); cached under `$SPECDEC_CACHE/gguf`."""
from __future__ import annotations

import os
from pathlib import Path

from harness.errors import HarnessError


def write_f32_gguf(source: Path, dest: Path, *, f16_matrices: bool = False) -> Path:
    """`source` with every tensor dequantized to float32 (metadata copied; file type ALL_F32). Cached.
    `f16_matrices`: the matrices (2-D and up) stored as float16 instead, the norms float32 (file type MOSTLY_F16;
    for engines that take no F32 GGUF: OpenVINO GenAI 2026.4)."""
    import gguf
    import numpy as np

    if dest.exists() and dest.stat().st_mtime >= source.stat().st_mtime:
        return dest
    reader = gguf.GGUFReader(str(source))
    arch = reader.fields["general.architecture"].contents()
    tmp = dest.with_suffix(f".tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16_matrices else gguf.LlamaFileType.ALL_F32)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        data = data.reshape(tuple(int(d) for d in reversed(t.shape.tolist())))
        writer.add_tensor(t.name, data.astype(np.float16) if f16_matrices and data.ndim > 1 else data)
    dest.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dest)
    return dest


def smollm2_models() -> tuple[Path, Path]:
    """(F32 target GGUF, Q4_1 draft GGUF) of the embedded SmolLM2."""
    from harness.models.smollm2 import default_cache_dir, gguf_path, smollm2_available

    ok, why = smollm2_available()
    if not ok:
        raise HarnessError(why)
    draft = gguf_path()
    return write_f32_gguf(draft, default_cache_dir().parent / "gguf" / "smollm2-135m-instruct-f32.gguf"), draft
