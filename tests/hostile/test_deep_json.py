"""Deep JSON: 100,000 nested brackets in every reader of outside JSON give one clear error naming the source,
never a RecursionError or a traceback; and safejson.loads is json.loads on ordinary input (hypothesis).

``json.loads`` recurses once per bracket (CPython's _json scanner calls Py_EnterRecursiveCall per nested array
or object), so each reader goes through safejson, which counts the nesting first, without recursion.
"""

from __future__ import annotations

import http.server
import io
import json
import math
import pickle
import sys
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import safejson
from tests.conftest import context_with

N = 100_000
DEEP = "[" * N + "]" * N
DEEP_OBJECT = '{"a":' * N + "1" + "}" * N
LIMIT = f"nested more than {safejson.MAX_DEPTH} levels deep"


# -- the loader ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT, DEEP.encode(), bytearray(DEEP_OBJECT.encode())])
def test_deep_input_is_refused_naming_the_source_before_json_recurses(text, monkeypatch):
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("json.loads saw the deep text"))
    with pytest.raises(safejson.JsonError) as refused:
        safejson.loads(text, source="s3://b/config.json")
    assert str(refused.value) == f"s3://b/config.json: JSON {LIMIT} (brackets), more than allowed"
    assert isinstance(refused.value, json.JSONDecodeError) and isinstance(refused.value, ValueError)


@pytest.mark.parametrize(
    ("levels", "ok"),
    [(safejson.MAX_DEPTH - 1, True), (safejson.MAX_DEPTH, True), (safejson.MAX_DEPTH + 1, False)],
)
def test_the_depth_limit_at_its_boundary(levels, ok):
    for text in ("[" * levels + "]" * levels, '{"k":' * levels + "0" + "}" * levels):
        if ok:
            assert safejson.loads(text, source="x") == json.loads(text)
        else:
            with pytest.raises(safejson.JsonError, match=LIMIT):
                safejson.loads(text, source="x")


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"s": "[" * 10_000, "t": ['\\"[[[', "{{{\\\\"], "u": "]" * 10_000})
    assert safejson.depth(text) == 2
    assert safejson.loads(text, source="x") == json.loads(text)


@pytest.mark.parametrize(("size", "ok"), [(99, True), (100, True), (101, False)])
def test_the_size_limit_at_its_boundary(size, ok):
    text = '"' + "a" * (size - 2) + '"'
    if ok:
        assert safejson.loads(text, source="f", max_size=100) == "a" * (size - 2)
    else:
        with pytest.raises(safejson.JsonError, match=r"^f: 101 characters of JSON, more than the 100 allowed$"):
            safejson.loads(text, source="f", max_size=100)
    with pytest.raises(safejson.JsonError, match="101 bytes") if not ok else _nothing():
        safejson.loads(text.encode(), source="f", max_size=100)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{oops", "f: not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("", "f: not valid JSON (Expecting value at line 1 column 1)"),
        (b"\xff\xfe\xff", "f: not JSON text in UTF-8, UTF-16 or UTF-32"),
        ("1" * 5000, "f: not valid JSON (Exceeds the limit (4300 digits)"),
    ],
)
def test_other_errors_name_the_source_too(text, said):
    with pytest.raises(safejson.JsonError) as refused:
        safejson.loads(text, source="f")
    assert str(refused.value).startswith(said)


def test_a_syntax_error_keeps_jsons_position_and_words():
    with pytest.raises(safejson.JsonError) as refused:
        safejson.loads('{"a": 1,\n "b" 2}', source="f")
    e = refused.value
    assert (e.msg, e.lineno, e.colno, e.pos) == ("Expecting ':' delimiter", 2, 6, 14)
    assert pickle.loads(pickle.dumps(e)).args == e.args


@pytest.mark.parametrize(
    ("doc", "pos"),
    [("", 0), ("x", 1), ("\nab", 0), ("\nab", 1), ("\nab", 2), ("a\nb\nc\nd", 5), ("ab\ncd\n", 1), ("\n\n\n", 3)],
)
def test_a_refusals_line_and_column_are_jsons_own(doc, pos):
    """Line and column counted as json.JSONDecodeError counts them: newlines before pos only, the last of them."""
    mine, json_own = safejson.JsonError("f", "why", doc, pos), json.JSONDecodeError("why", doc, pos)
    assert (mine.lineno, mine.colno, mine.pos, mine.doc) == (json_own.lineno, json_own.colno, pos, doc)


def test_a_refusal_without_a_document_is_at_line_1_column_1():
    e = safejson.JsonError("f", "too big")
    assert (e.doc, e.pos, e.lineno, e.colno, e.msg, str(e)) == ("", 0, 1, 1, "too big", "f: too big")


def test_utf8_bytes_with_a_lone_surrogate_read_as_json_loads_reads_them():
    text = b'["\xed\xa0\x80"]'  # U+D800 encoded as UTF-8: json.loads decodes bytes with "surrogatepass"
    assert safejson.loads(text, source="f") == json.loads(text) == ["\ud800"]


def test_more_brackets_than_the_limit_but_nested_exactly_to_it_is_read():
    text = "[[[]],[],{}]"  # 5 opening brackets, nested 3 deep
    assert safejson.depth(text) == 3
    assert safejson.loads(text, source="f", max_depth=3) == [[[]], [], {}]
    with pytest.raises(safejson.JsonError, match="nested more than 2 levels deep"):
        safejson.loads(text, source="f", max_depth=2)


def test_a_recursion_error_that_still_happens_is_converted(monkeypatch):
    def recurse(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(json, "loads", recurse)
    with pytest.raises(safejson.JsonError, match=r"^f: JSON nested too deep for this process to read$"):
        safejson.loads("[]", source="f")


def test_a_hooks_own_value_error_passes_through():
    def refuse(pairs):
        raise ValueError("the hook's words")

    with pytest.raises(ValueError, match=r"^the hook's words$"):
        safejson.loads('{"a": 1}', source="f", object_pairs_hook=refuse)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_the_loader_equals_json_loads_on_ordinary_input(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    assert safejson.loads(text, source="x") == json.loads(text)
    assert safejson.loads(text.encode("utf-8"), source="x") == json.loads(text.encode("utf-8"))
    assert safejson.loads(text.encode("utf-16"), source="x") == json.loads(text.encode("utf-16"))


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('[]{}",:\\ 01a'), max_size=60))
def test_the_loader_agrees_with_json_loads_on_any_text(text):
    """Shallow text: the same value, or an error where json.loads has one (JsonError is a JSONDecodeError)."""
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(safejson.JsonError):
            safejson.loads(text, source="x")
    else:
        got = safejson.loads(text, source="x")
        assert got == expected or (isinstance(got, float) and math.isnan(got))


@settings(max_examples=200, deadline=None)
@given(levels=st.integers(0, 2000), inner=st.sampled_from(["1", '"]]]"', '{"a": []}', "[]"]))
def test_the_depth_scan_counts_nesting_exactly(levels, inner):
    text = "[" * levels + inner + "]" * levels
    extra = {"{": 2, "[": 1}.get(inner[0], 0)
    assert safejson.depth(text) == levels + extra
    if levels + extra > safejson.MAX_DEPTH:
        with pytest.raises(safejson.JsonError, match=LIMIT):
            safejson.loads(text, source="x")
    elif levels + extra < 900:  # below the interpreter's recursion limit json.loads answers too
        assert safejson.loads(text, source="x") == json.loads(text)


# -- every reader ------------------------------------------------------------------------------------------


def _config_problems(**context) -> str:
    from constructs_lib.deployment.config import ConfigError, DeploymentConfig

    with pytest.raises(ConfigError) as refused:
        DeploymentConfig.from_context(context_with(**context))
    return "\n".join(refused.value.problems)


def context_value(key):
    def read(deep, tmp_path, monkeypatch):
        said = _config_problems(**{key: deep})
        assert said.startswith(f"{key}=")
        return said

    return read


def fleet_file(deep, tmp_path, monkeypatch):
    from constructs_lib.deployment.config import ConfigError
    from constructs_lib.deployment.fleet import deployments_of

    path = tmp_path / "fleet.json"
    path.write_text(deep)
    with pytest.raises(ConfigError) as refused:
        deployments_of({"deployments_file": str(path)}, read_text=lambda p: path.read_text())
    return "\n".join(refused.value.problems)


def fleet_inline(deep, tmp_path, monkeypatch):
    from constructs_lib.deployment.config import ConfigError
    from constructs_lib.deployment.fleet import deployments_of

    with pytest.raises(ConfigError) as refused:
        deployments_of({"deployments": deep}, read_text=lambda p: "")
    return "\n".join(refused.value.problems)


def model_facts(deep, tmp_path, monkeypatch):
    from llmops.facts import FactsError, FactsRecord

    (tmp_path / "model-facts.json").write_text(deep)
    with pytest.raises(FactsError) as refused:
        FactsRecord.load(tmp_path / "model-facts.json")
    return str(refused.value)


def facts_at_synth(deep, tmp_path, monkeypatch):
    import aws_cdk as cdk

    from app import build_app
    from constructs_lib.deployment import FactsSource
    from constructs_lib.model_facts import FactsError

    (tmp_path / "model-facts.json").write_text(deep)
    with pytest.raises(FactsError) as refused:
        build_app(cdk.App(context=context_with()), facts=FactsSource(tmp_path / "model-facts.json"))
    return str(refused.value)


def context_file(deep, tmp_path, monkeypatch):
    from llmops.context import context_of

    (tmp_path / "cdk.json").write_text(deep)
    said = context_of([], tmp_path / "cdk.json")
    assert isinstance(said, str)
    return said


def plan_config(deep, tmp_path, monkeypatch, capsys):
    from llmops.plan import main

    (tmp_path / "config.json").write_text(deep)
    argv = ["--config", str(tmp_path / "config.json"), "--weights-bytes", "1", "--instance-type", "ml.g6.xlarge"]
    assert main(argv) == 2
    return capsys.readouterr().err


class S3Body:
    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, *args):
        return self._data.read(*args)

    def close(self):
        pass


class FakeS3:
    """get_object and list_objects_v2 of one prefix whose every object holds ``data``."""

    def __init__(self, data: bytes, keys=("config.json",)) -> None:
        self.data, self.keys = data, keys

    def get_object(self, Bucket, Key, **kwargs):
        return {"Body": S3Body(self.data)}

    def get_paginator(self, name):
        keys = self.keys
        return SimpleNamespace(
            paginate=lambda Bucket, Prefix: [{"Contents": [{"Key": Prefix + k, "Size": 10} for k in keys]}]
        )


def plan_s3_config(deep, tmp_path, monkeypatch):
    from llmops.plan import S3ReadError, _get_json

    with pytest.raises(S3ReadError) as refused:
        _get_json(FakeS3(deep.encode()), "bucket", "prefix/config.json")
    return str(refused.value)


def preflight_config(deep, tmp_path, monkeypatch):
    import importlib

    from tests.fakes.handlers import LAMBDA_DIR

    monkeypatch.syspath_prepend(str(LAMBDA_DIR / "deployment_preflight"))  # as the Lambda runtime does
    module = importlib.import_module("preflight_checkpoint")
    checkpoint = module.read_checkpoint(FakeS3(deep.encode()), "bucket", "prefix/")
    ((name, why),) = checkpoint.unusable.items()
    return f"{name} {why}"


def staging_manifest(deep, tmp_path, monkeypatch):
    from hfstage.manifest import read_manifest

    with pytest.raises(ValueError) as refused:
        read_manifest(FakeS3(deep.encode()), "bucket", "prefix/")
    return str(refused.value)


def adapter_config(deep, tmp_path, monkeypatch):
    from preflight.adapters import adapter_config_problems

    (problem,) = adapter_config_problems(deep, adapter="a1", base_model_id="Org/Base", max_lora_rank=16)
    return problem


def worker_patterns(deep, tmp_path, monkeypatch):
    from hfstage.base import Failure, patterns

    with pytest.raises(Failure) as refused:
        patterns([DEEP])  # only an array is read as JSON
    return str(refused.value)


def worker_token(deep, tmp_path, monkeypatch):
    from hfstage.worker import parse_token

    with pytest.raises(ValueError) as refused:
        parse_token("{" + deep[1:-1].replace("[", '{"a":').replace("]", "}") + "}")
    return str(refused.value)


def worker_hosts(deep, tmp_path, monkeypatch):
    from hfstage.shard import read_hosts

    (tmp_path / "resourceconfig.json").write_text(deep)
    with pytest.raises(ValueError) as refused:
        read_hosts(str(tmp_path / "resourceconfig.json"))
    return str(refused.value)


class DeepServer(http.server.ThreadingHTTPServer):
    """Answers every GET with ``body`` as JSON (the Hub's revision listing, for both Hub clients)."""

    def __init__(self, body: bytes) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def deep_hub():
    servers = []

    def start(body: bytes) -> DeepServer:
        servers.append(DeepServer(body))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def staging_hub_listing(deep, tmp_path, monkeypatch, deep_hub):
    from hfstage.hub import HubClient, HubUnavailable

    hub = deep_hub(deep.encode())
    with pytest.raises(HubUnavailable) as refused:
        HubClient(hub.endpoint, timeout=10).revision_info("Org/Model", "main")
    return str(refused.value)


def llmops_hub_listing(deep, tmp_path, monkeypatch, deep_hub):
    from llmops.hub import HubError, fetch_model
    from tests.fakes.fake_hub import use_fake_hub

    hub = deep_hub(deep.encode())
    use_fake_hub(monkeypatch, tmp_path, SimpleNamespace(endpoint=hub.endpoint))
    with pytest.raises(HubError) as refused:
        fetch_model("Org/Model", "main", timeout=10)
    return str(refused.value)


def llmops_hub_config(deep, tmp_path, monkeypatch):
    import huggingface_hub

    from llmops import hub
    from llmops.hub import HubError, fetch_model

    (tmp_path / "config.json").write_text(deep)
    info = SimpleNamespace(sha="a" * 40, siblings=[])
    monkeypatch.setattr(hub, "_api", lambda token: SimpleNamespace(model_info=lambda *a, **k: info))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: str(tmp_path / "config.json"))
    with pytest.raises(HubError) as refused:
        fetch_model("Org/Model", "main")
    return str(refused.value)


def handler_object_property(deep, tmp_path, monkeypatch):
    from handler_kit.resources import OBJECT, _read

    problems: list[str] = []
    assert _read("Env", OBJECT, deep, problems) is None
    return problems[0] + " (Env)"


def handler_list_property(deep, tmp_path, monkeypatch):
    from handler_kit import string_list

    assert string_list(deep) == (deep,)  # no JSON array: the text is one element, as before
    return "a list property: JSON " + LIMIT


def engine_env_value(deep, tmp_path, monkeypatch):
    from constructs_lib.engines import argv_tokens, get_engine

    assert argv_tokens(get_engine("vllm"), deep) == [deep]  # no JSON array: one token, as any other text
    return "an engine_env value: JSON " + LIMIT


def format_alternatives(deep, tmp_path, monkeypatch):
    from preflight.formats import check_deployment

    check_deployment({}, engine="vllm", compute_capability="8.9", alternatives_json=deep)  # ignored: none given
    return "alternatives: JSON " + LIMIT


def bench_prompts(deep, tmp_path, monkeypatch):
    from llmops.bench import load_prompts

    (tmp_path / "prompts.jsonl").write_text(deep + "\n")
    with pytest.raises(ValueError) as refused:
        load_prompts(tmp_path / "prompts.jsonl")
    return str(refused.value)


def command_extra(module):
    def read(deep, tmp_path, monkeypatch):
        err = io.StringIO()
        main = __import__(f"llmops.{module}", fromlist=["main"]).main
        args = ["--endpoint", "my-endpoint", "--extra", deep]
        code = main([*args, "hello"] if module == "invoke" else args, stderr=err, environ={})
        assert code == 2
        return err.getvalue()

    return read


def price_item(deep, tmp_path, monkeypatch):
    from llmops.price_list import parse_price_item

    with pytest.raises(safejson.JsonError) as refused:
        parse_price_item(deep, read_on="2026-01-01")
    return str(refused.value)


def price_cache(deep, tmp_path, monkeypatch):
    from llmops.price_list import cache_path, read_cache

    cache_path("us-east-1", tmp_path).parent.mkdir(parents=True, exist_ok=True)
    cache_path("us-east-1", tmp_path).write_text(deep)
    assert read_cache("us-east-1", tmp_path) is None  # an unusable cache is looked up again
    return "cache: JSON " + LIMIT


def resolve_image_context(deep, tmp_path, monkeypatch, capsys):
    from llmops.resolve_image import main

    (tmp_path / "cdk.context.json").write_text(deep)
    argv = ["--engine", "vllm", "--instance-type", "ml.g6.xlarge", "--region", "us-east-1"]
    assert main([*argv, "--context-file", str(tmp_path / "cdk.context.json")], ecr_client=object()) == 2
    return capsys.readouterr().err


def summary_template(deep, tmp_path, monkeypatch, capsys):
    from llmops.summary import main

    (tmp_path / "LlmEndpoint.template.json").write_text(deep)
    stack = {"type": "aws:cloudformation:stack", "properties": {"templateFile": "LlmEndpoint.template.json"}}
    (tmp_path / "manifest.json").write_text(json.dumps({"artifacts": {"LlmEndpoint": stack}}))
    assert main([str(tmp_path)]) == 1
    return capsys.readouterr().err


def summary_manifest(deep, tmp_path, monkeypatch, capsys):
    from llmops.summary import main

    (tmp_path / "manifest.json").write_text(deep)
    assert main([str(tmp_path)]) == 1
    return capsys.readouterr().err


def playground_body(deep, tmp_path, monkeypatch):
    from email.message import Message

    from llmops import playground

    handler = object.__new__(playground._Handler)
    body = deep.encode()
    handler.headers = Message()
    handler.headers["Content-Type"] = "application/json"
    handler.headers["Content-Length"] = str(len(body))
    handler.rfile = io.BytesIO(body)
    monkeypatch.setattr(playground, "MAX_BODY_BYTES", len(body))
    with pytest.raises(playground.Refused) as refused:
        handler._read_json()
    return f"the body: {refused.value}"


READERS = {
    # context values (constructs_lib/deployment/parsers.py): engine_env and the other JSON objects, pattern and id
    # arrays
    "engine_env": (context_value("engine_env"), "engine_env="),
    "container_env": (context_value("container_env"), "container_env="),
    "smoke_inputs": (context_value("smoke_inputs"), "smoke_inputs="),
    "tags": (context_value("tags"), "tags="),
    "include": (context_value("include"), "include="),
    "vpc_subnet_ids": (context_value("vpc_subnet_ids"), "vpc_subnet_ids="),
    "deployments_file": (fleet_file, "deployments_file="),
    "deployments": (fleet_inline, "deployments"),
    "model-facts.json": (model_facts, "model-facts.json"),
    "model-facts.json at synth": (facts_at_synth, "model-facts.json"),
    "--context-file": (context_file, "--context-file"),
    "plan --config": (plan_config, "config.json"),
    "plan s3 config.json": (plan_s3_config, "s3://bucket/prefix/config.json"),
    "deploy preflight config.json": (preflight_config, "config.json"),
    "staging manifest": (staging_manifest, "s3://bucket/prefix/.hf-model-manifest.json"),
    "adapter_config.json": (adapter_config, "adapter a1: adapter_config.json"),
    "worker resource config": (worker_hosts, "resourceconfig.json"),
    "staging Hub listing": (staging_hub_listing, "resolving Org/Model@main"),
    "llmops Hub config.json": (llmops_hub_config, "Org/Model: config.json"),
    "handler list property": (handler_list_property, "a list property"),
    "engine_env value tokens": (engine_env_value, "engine_env value"),
    "preflight alternatives": (format_alternatives, "alternatives"),
    "bench prompts": (bench_prompts, "prompts.jsonl:1"),
    "bench --extra": (command_extra("bench"), "--extra"),
    "invoke --extra": (command_extra("invoke"), "--extra"),
    "price list item": (price_item, "a PriceList item"),
    "price list cache": (price_cache, "cache"),
    "resolve_image context file": (resolve_image_context, "cdk.context.json"),
    "summary template": (summary_template, "LlmEndpoint.template.json"),
    "summary manifest": (summary_manifest, "manifest.json"),
    "playground body": (playground_body, "the body"),
}
# Readers whose message is their own (a secret's text is never echoed; the Hub client's words are
# huggingface_hub's): they say what was read, not the depth.
OWN_WORDS = {
    "worker token": (worker_token, "the secret looks like JSON but does not parse"),
    "worker --include": (worker_patterns, "is not a JSON array of patterns"),
    "handler object property": (handler_object_property, "is not a JSON object (Env)"),
    "llmops Hub listing": (llmops_hub_listing, "Org/Model@main"),
}


@pytest.mark.parametrize("shape", ["array", "object"])
@pytest.mark.parametrize("name", [*READERS, *OWN_WORDS])
def test_every_reader_refuses_deep_json_naming_the_source(name, shape, tmp_path, monkeypatch, request):
    read, source = {**READERS, **OWN_WORDS}[name]
    deep = DEEP if shape == "array" else DEEP_OBJECT
    extras = {"capsys": request.getfixturevalue("capsys")} if "capsys" in read.__code__.co_varnames else {}
    if "deep_hub" in read.__code__.co_varnames:
        extras["deep_hub"] = request.getfixturevalue("deep_hub")
    before = sys.getrecursionlimit()
    said = read(deep, tmp_path, monkeypatch, **extras)
    assert sys.getrecursionlimit() == before
    assert source in said, said
    assert "RecursionError" not in said and "Traceback" not in said and "maximum recursion" not in said
    if name in READERS and name != "playground body":
        assert "nested more than 512 levels deep" in said or "nested too deep" in said, said
    assert max(map(len, said.splitlines())) < 600  # short lines, not the text


def test_every_handler_and_the_staging_worker_ship_the_loader(tmp_path):
    """The loader travels with the code that imports it: each handler's asset and the worker's zip folder."""
    from tests.conftest import build

    build(outdir=str(tmp_path)).synth()
    assets = [p for p in tmp_path.glob("asset.*") if p.is_dir()]
    handlers = [p for p in assets if (p / "index.py").is_file()]
    workers = [p for p in assets if (p / "hfstage" / "worker.py").is_file() and not (p / "index.py").exists()]
    assert len(handlers) >= 3 and len(workers) == 1
    for folder in [*handlers, *workers]:
        assert (folder / "safejson" / "__init__.py").is_file(), folder.name


@pytest.mark.parametrize(("length", "cut"), [(197, False), (198, False), (199, True)])
def test_a_bad_context_value_is_echoed_up_to_200_characters_then_cut_with_its_length(length, cut):
    from constructs_lib.deployment.config import MAX_ECHOED

    raw = "x" * length  # not JSON: its repr is length + 2 characters
    said = _config_problems(tags=raw)
    assert MAX_ECHOED == 200
    if cut:
        assert said.startswith(f"tags='{'x' * 99}… ({length:,} characters): not valid JSON")
    else:
        assert said.startswith(f"tags={raw!r}: not valid JSON")
