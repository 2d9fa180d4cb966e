"""``llmops`` Hub reads through a mirror that lists files without sizes (no ``blobs=true`` answer): each size
from a HEAD of the file, as huggingface_hub's get_hf_file_metadata reads it; none at all is refused."""

from __future__ import annotations

import json

import pytest

from llmops.hub import HubError, fetch_files, fetch_model
from tests.fakes.fake_hub import Declared, FakeHub, use_fake_hub

CONFIG = {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2, "torch_dtype": "bfloat16"}
FILES = {
    "config.json": json.dumps(CONFIG).encode(),
    "model-00001-of-00002.safetensors": Declared(3_000_000_000),
    "model-00002-of-00002.safetensors": Declared(1_000_000_001),
}


@pytest.fixture
def hub():
    with FakeHub() as fake:
        fake.add_repo("Org/M", FILES)
        yield fake


def test_sizes_come_from_a_head_when_the_listing_has_none(hub: FakeHub, monkeypatch, tmp_path) -> None:
    use_fake_hub(monkeypatch, tmp_path, hub)
    full = fetch_model("Org/M")
    hub.listing = "names"
    mirrored = fetch_model("Org/M")
    assert mirrored.weight_bytes == full.weight_bytes == 4_000_000_001
    assert fetch_files("Org/M")[1] == full.sizes
    assert {r.file for r in hub.requests if r.method == "HEAD"} >= set(FILES)


def test_a_mirror_that_gives_no_size_at_all_is_refused(hub: FakeHub, monkeypatch, tmp_path) -> None:
    use_fake_hub(monkeypatch, tmp_path, hub)
    hub.listing = "names"
    hub.resolve_drops = ("X-Linked-Size",)
    with pytest.raises(HubError, match=r"neither the listing nor a HEAD of model-0000\d-of-00002.safetensors gives"):
        fetch_files("Org/M")
