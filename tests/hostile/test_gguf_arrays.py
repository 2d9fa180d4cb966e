"""GGUF header arrays cost what the header holds, and model-facts.json gets no large arrays (issue 34, item 10).

A header of many small-element arrays (4096 uint8 each: kept as lists they cost ~9x their bytes, an 8-byte
slot per element) is read with memory about the header's own size, and only the per-layer arrays the fit
estimate reads (``<arch>.attention.head_count[_kv]``, ``.sliding_window_pattern``) are kept; every other array
(tokenizer tokens, scores, merges, anything a hostile header adds) is its element type and length only, so
the metadata written to model-facts.json holds no array longer than the layer count.
"""

from __future__ import annotations

import json
import struct
import tracemalloc

from llmops.facts import _json_safe
from preflight.gguf import MAX_KEPT_ARRAY, gguf_config, read_header
from tests.hostile.tally import Tally, report_fixture
from tests.preflight.test_gguf_header import gguf_bytes, gguf_key, reader_of

TALLY = Tally()
_report_tally = report_fixture(TALLY)
ARRAYS = 128
LAYERS = 48


def _hostile_header() -> bytes:
    u8 = struct.pack("<IQ", 0, MAX_KEPT_ARRAY) + bytes(range(256)) * (MAX_KEPT_ARRAY // 256)
    tokens = struct.pack("<IQ", 8, 3000) + b"".join(struct.pack("<Q", 2) + b"%02d" % (i % 100) for i in range(3000))
    entries = [gguf_key(f"junk.array.{i}", 9, u8) for i in range(ARRAYS)]
    entries += [
        gguf_key("general.architecture", 8, struct.pack("<Q", 5) + b"llama"),
        gguf_key("llama.block_count", 4, struct.pack("<I", LAYERS)),
        gguf_key("llama.attention.head_count", 4, struct.pack("<I", 32)),
        gguf_key("llama.attention.head_count_kv", 9, struct.pack("<IQ", 4, LAYERS) + struct.pack("<I", 8) * LAYERS),
        gguf_key("tokenizer.ggml.tokens", 9, tokens),
    ]
    return gguf_bytes(3, *entries)


def test_many_small_element_arrays_cost_about_the_header_and_are_not_kept():
    data = _hostile_header()
    tracemalloc.start()
    try:
        header = read_header(reader_of(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The header's bytes are held once (the read buffer), plus a copy while reading; lists cost ~9x.
    assert peak < 3 * len(data), f"{peak} bytes traced for a {len(data)}-byte header ({peak / len(data):.1f}x)"
    assert all(repr(header.metadata[f"junk.array.{i}"]) == "ArrayInfo(type=0, length=4096)" for i in range(ARRAYS))
    assert repr(header.metadata["tokenizer.ggml.tokens"]) == "ArrayInfo(type=8, length=3000)"
    assert header.metadata["llama.attention.head_count_kv"] == [8] * LAYERS  # what the checks read
    assert gguf_config(header)["num_key_value_heads"] == 8
    TALLY.record("small-element arrays", True)


def test_model_facts_get_no_array_longer_than_the_layer_count():
    header = read_header(reader_of(_hostile_header()))
    written = json.dumps(_json_safe(header.metadata))
    arrays = [v for v in json.loads(written).values() if isinstance(v, list)]
    assert [len(a) for a in arrays] == [LAYERS]
    assert len(written) < 1024, len(written)
    TALLY.record("model-facts arrays", True)
