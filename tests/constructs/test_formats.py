"""Weight format against GPU: the table (preflight/data/weight_formats.json), its check, and the synth guard."""

from __future__ import annotations

import pytest

from constructs_lib.catalog import lookup_instance
from constructs_lib.endpoint_plan import plan_endpoint
from constructs_lib.engines import get_engine
from constructs_lib.format_guard import nearest_capable
from constructs_lib.images import ServingImage
from preflight.formats import (
    check_checkpoint,
    check_formats,
    checkpoint_dtype,
    format_table,
    quantization_format,
    required_capabilities,
    resolve_formats,
)

BF16 = {"torch_dtype": "bfloat16", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512}


def test_every_row_has_a_source_a_minimum_and_engines():
    rows = format_table()["formats"]
    for name, row in rows.items():
        assert row["sources"] and all(s.startswith("https://") for s in row["sources"]), name
        assert row["engines"] and row["min_compute_capability"] and row["below_min"], name
        if "native_compute_capability" in row:
            assert row["below_native"], name
    assert {"bfloat16", "fp8", "mxfp4", "nvfp4", "awq", "gptq", "bitsandbytes", "compressed-tensors"} <= set(rows)
    assert required_capabilities() == sorted(required_capabilities(), key=lambda t: tuple(map(int, t.split("."))))


@pytest.mark.parametrize(
    ("quant", "expected"),
    [
        ({"quant_method": "fp8"}, "fp8"),
        ({"quant_method": "fbgemm_fp8"}, "fp8"),
        ({"quant_method": "awq", "bits": 4}, "awq"),
        ({"quant_method": "gptq", "bits": 4}, "gptq"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bitsandbytes"),
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "nvfp4"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "fp8",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
            "compressed-tensors",
        ),
        ({"quant_method": "hqq"}, "hqq"),
    ],
)
def test_quantization_formats_are_read_from_config(quant, expected):
    assert quantization_format({"quantization_config": quant}) == expected
    # Multimodal configs nest it under text_config.
    assert quantization_format({"text_config": {"quantization_config": quant}}) == expected


def test_bfloat16_asked_for_on_t4_and_v100_is_refused_with_the_reason_and_the_nearest_instance():
    for instance_type, cc in (("ml.g4dn.xlarge", "7.5"), ("ml.p3.2xlarge", "7.0")):
        spec = lookup_instance(instance_type)
        check = check_checkpoint(
            BF16,
            engine="vllm",
            compute_capability=spec.compute_capability,
            dtype="bfloat16",  # the engine's dtype flag: vLLM's check_if_supports_dtype raises
            alternatives=nearest_capable(spec),
        )
        assert not check.ok
        (problem,) = check.problems
        assert f"compute capability {cc})" in problem and "8.0 or newer" in problem
        assert "Bfloat16 is only supported on GPUs with compute capability of at least 8.0" in problem
        assert "nearest instance type that can: ml.g6.xlarge" in problem  # cheapest known with >= its GPUs
    # Serving it in float16 (the engine's dtype flag) is the documented way out.
    assert check_checkpoint(BF16, engine="vllm", compute_capability="7.5", dtype="float16").ok
    assert check_checkpoint(BF16, engine="vllm", compute_capability="8.0").ok


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("dtype", [None, "auto"])
def test_a_bfloat16_checkpoint_with_dtype_auto_runs_in_float16_below_ampere_with_a_warning(engine, dtype):
    # vLLM's _resolve_auto_dtype falls back to float16 on a GPU without bfloat16 (CudaPlatformBase.supported_dtypes);
    # SGLang's model runner switches to float16 below sm80. Refusing would turn away a deployment that starts.
    t4 = check_checkpoint(BF16, engine=engine, compute_capability="7.5", dtype=dtype)
    assert t4.ok, t4.problems
    (warning,) = t4.warnings
    assert "float16" in warning and "overflow" in warning and "compute capability 7.5" in warning
    assert t4.min_compute_capability == ("7.5" if engine == "sglang" else "7.0")  # float16's row, now checked
    assert check_checkpoint(BF16, engine=engine, compute_capability="8.0", dtype=dtype).warnings == []


def test_volta_is_refused_for_sglang_in_any_16_bit_dtype_and_served_by_vllm_in_float16():
    # SGLang's model runner: "SGLang only supports sm75 and above."
    for config in (BF16, {**BF16, "torch_dtype": "float16"}):
        v100 = check_checkpoint(
            config, engine="sglang", compute_capability="7.0", alternatives={"7.5": "ml.g4dn.xlarge"}
        )
        (problem,) = v100.problems
        assert "float16 weights and compute need compute capability 7.5 or newer with sglang" in problem
        assert "SGLang only supports sm75 and above" in problem and "ml.g4dn.xlarge" in problem
    assert check_checkpoint(BF16, engine="vllm", compute_capability="7.0").ok
    # An engine without a sourced fallback (LMI) is still refused, rather than guessed.
    assert not check_checkpoint(BF16, engine="lmi", compute_capability="7.5").ok


def test_fp8_on_a10g_runs_weight_only_and_says_so_and_fp8_on_volta_is_refused():
    fp8 = {**BF16, "quantization_config": {"quant_method": "fp8"}}
    a10g = check_checkpoint(fp8, engine="vllm", compute_capability="8.6")
    assert a10g.ok and a10g.formats == ("bfloat16", "fp8")
    (warning,) = a10g.warnings
    assert "Marlin" in warning and "weight-only" in warning and "8.9" in warning
    assert check_checkpoint(fp8, engine="vllm", compute_capability="8.9").warnings == []
    volta = check_checkpoint({**fp8, "torch_dtype": "float16"}, engine="vllm", compute_capability="7.0")
    assert not volta.ok and "FP8 weights" in volta.problems[0]


@pytest.mark.parametrize(
    ("quant", "cc", "ok"),
    [
        ({"quant_method": "awq"}, "7.0", False),
        ({"quant_method": "awq"}, "7.5", True),
        ({"quant_method": "gptq"}, "7.0", True),
        ({"quant_method": "bitsandbytes"}, "7.0", True),
        ({"quant_method": "mxfp4"}, "7.5", False),
        ({"quant_method": "mxfp4"}, "8.0", True),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "8.9", True),
    ],
)
def test_quantized_formats_against_compute_capability(quant, cc, ok):
    config = {"torch_dtype": "float16", "quantization_config": quant}
    assert check_checkpoint(config, engine="vllm", compute_capability=cc).ok is ok


def test_nvfp4_below_blackwell_is_a_warning():
    check = check_checkpoint(
        {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}},
        engine="vllm",
        compute_capability="9.0",
    )
    assert check.ok and "Blackwell" in check.warnings[0]


def test_what_the_table_cannot_judge_is_a_note_not_a_refusal():
    awq = {"torch_dtype": "float16", "quantization_config": {"quant_method": "awq"}}
    sglang = check_checkpoint(awq, engine="sglang", compute_capability="7.5")  # (7.0: SGLang refuses any dtype)
    assert sglang.ok and "no source for engine 'sglang'" in sglang.notes[0]
    unknown_gpu = check_formats(("bfloat16",), compute_capability=None, engine="vllm")
    assert unknown_gpu.ok and "compute capability is unknown" in unknown_gpu.notes[0]
    odd = check_formats(("hqq",), compute_capability="7.0", engine="vllm")
    assert odd.ok and "not in the format table" in odd.notes[0]


def test_the_engine_flags_win_over_config_json():
    assert resolve_formats(BF16, dtype="half") == ("float16",)
    assert resolve_formats(BF16, quantization="fp8") == ("bfloat16", "fp8")
    assert resolve_formats({"text_config": {"torch_dtype": "bfloat16"}}) == ("bfloat16",)
    assert resolve_formats({}) == ()


# --- synth time: a format stated in engine_env --------------------------------------------------------


def plan(instance_type: str, engine_env: dict):
    engine = get_engine("vllm")
    # A CUDA 12 image, so that the older GPUs (Volta) pass the image check and only the format is judged.
    image = ServingImage.from_dlc(engine, "0.10.1-gpu-py312-cu128-ubuntu22.04-sagemaker")
    return plan_endpoint(engine=engine, image=image, instance_type=instance_type, engine_env=engine_env)


def test_synth_refuses_bfloat16_stated_for_a_t4_or_v100():
    for instance_type in ("ml.g4dn.xlarge", "ml.p3.2xlarge"):
        result = plan(instance_type, {"SM_VLLM_DTYPE": "bfloat16"})
        (error,) = [e for e in result.errors if "DTYPE" in e]
        assert error.startswith("engine_env SM_VLLM_DTYPE=bfloat16: bfloat16 weights and compute need compute")
        assert instance_type in error and "ml.g6.xlarge" in error
    assert not [e for e in plan("ml.g4dn.xlarge", {"SM_VLLM_DTYPE": "float16"}).errors if "DTYPE" in e]


def test_synth_warns_for_fp8_on_a10g_and_passes_without_a_stated_format():
    result = plan("ml.g5.xlarge", {"SM_VLLM_QUANTIZATION": "fp8"})
    assert not [e for e in result.errors if "QUANTIZATION" in e]
    assert any("SM_VLLM_QUANTIZATION=fp8" in w and "Marlin" in w for w in result.warnings)
    assert not [e for e in plan("ml.g4dn.xlarge", {"SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}).errors if "format" in e]


def test_the_preflight_properties_arrive_as_text():
    from preflight.formats import check_deployment

    problems, _ = check_deployment(
        BF16, engine="vllm", compute_capability="7.5", dtype="bfloat16", alternatives_json='{"8.0": "ml.g5.xlarge"}'
    )
    assert "nearest instance type that can: ml.g5.xlarge" in problems[0]
    problems, _ = check_deployment(
        BF16, engine="vllm", compute_capability="7.5", dtype="bfloat16", alternatives_json="{not json"
    )
    assert problems and "nearest" not in problems[0]
    assert check_deployment(BF16, engine="vllm", compute_capability="") == (
        [],
        ["bfloat16 weights and compute: the GPU's compute capability is unknown, not checked"],
    )


# --- how config.json states formats, as real checkpoints write them --------------------------------------


@pytest.mark.parametrize("nest", ["text_config", "llm_config", "language_config"])
def test_a_nested_language_models_dtype_and_quantization_are_found(nest):
    # InternVL nests it under llm_config, some VLMs under language_config, Llama 4 / Gemma 3 under text_config.
    config = {nest: {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "awq"}}}
    assert resolve_formats(config) == ("bfloat16", "awq")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"dtype": "bfloat16"}, "bfloat16"),  # transformers v5 writes dtype, not torch_dtype
        ({"torch_dtype": "torch.float16"}, "float16"),  # some exporters write the torch name
        ({"torch_dtype": "BF16"}, "bfloat16"),
    ],
)
def test_the_compute_dtype_is_read_however_config_json_spells_it(config, expected):
    assert checkpoint_dtype(config) == expected


@pytest.mark.parametrize(
    ("quant", "expected"),
    [
        # ModelOpt's INT4 AWQ (quant_algo W4A16_AWQ) is neither FP4 nor FP8: not checked as either.
        ({"quant_method": "modelopt", "quant_algo": "W4A16_AWQ"}, "modelopt"),
        ({"quant_method": "modelopt"}, "modelopt"),
        # compressed-tensors NVFP4 from its weights (num_bits 4, float) when no format string says so.
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float"}}},
            },
            "nvfp4",
        ),
        # A group that is not a mapping is skipped, not a crash (the preflight Lambda reads any config.json).
        ({"quant_method": "compressed-tensors", "config_groups": {"bad": None}}, "compressed-tensors"),
        ({"quant_method": ""}, None),
    ],
)
def test_quantization_formats_from_less_common_configs(quant, expected):
    assert quantization_format({"quantization_config": quant}) == expected


def test_a_dtype_flag_the_table_does_not_know_is_named_not_replaced_by_config_json():
    assert resolve_formats(BF16, dtype="Float64") == ("float64",)
    check = check_checkpoint(BF16, engine="vllm", compute_capability="7.5", dtype="Float64")
    assert check.ok and check.notes == [
        "weight format 'float64' is not in the format table: not checked against the GPU"
    ]


def test_every_format_is_checked_after_one_that_cannot_be():
    # After an unknown format, one the engine has no source for, or an unknown GPU, the next is still judged.
    unknown_first = check_formats(("float64", "awq"), compute_capability="7.0", engine="vllm")
    assert len(unknown_first.notes) == 1 and "AWQ" in unknown_first.problems[0]
    sglang = check_formats(("awq", "float16"), compute_capability="7.0", engine="sglang")
    assert len(sglang.notes) == 1 and "SGLang only supports sm75 and above" in sglang.problems[0]
    no_gpu = check_formats(("bfloat16", "fp8"), compute_capability=None, engine="vllm")
    assert len(no_gpu.notes) == 2 and no_gpu.min_compute_capability == "8.0"
    # Two formats below the GPU: both refused, both named.
    both = check_checkpoint(
        {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "awq"}},
        engine="vllm",
        compute_capability="7.0",
        dtype="bfloat16",
    )
    assert [p.split(" need ")[0] for p in both.problems] == ["bfloat16 weights and compute", "AWQ 4-bit weights"]


def test_the_refusal_names_the_gpu_the_rule_and_the_source_exactly():
    rows = format_table()["formats"]
    check = check_checkpoint(BF16, engine="vllm", compute_capability="7.5", dtype="bfloat16")
    assert check.problems == [
        "bfloat16 weights and compute need compute capability 8.0 or newer with vllm; this GPU (compute capability "
        f"7.5) cannot run them: {rows['bfloat16']['below_min']}. Source: {rows['bfloat16']['sources'][0]}"
    ]
    direct = check_formats(("bfloat16",), compute_capability="7.5", engine="vllm")
    assert direct.problems == check.problems
    # The auto-dtype fallback warning cites the fallback's own first source (vLLM's _resolve_auto_dtype).
    (warning,) = check_checkpoint(BF16, engine="vllm", compute_capability="7.5").warnings
    assert warning.endswith(f"Source: {rows['bfloat16']['auto_fallback']['sources'][0]}")
    assert "vllm/config/model.py (_resolve_auto_dtype)" in warning


def test_a_quantization_flag_is_checked_at_deploy_time_as_cloudformation_passes_it():
    from preflight.formats import check_deployment

    assert check_checkpoint(BF16, engine="vllm", compute_capability="8.6", quantization="fp8").formats == (
        "bfloat16",
        "fp8",
    )
    problems, _ = check_deployment(BF16, engine="vllm", compute_capability="7.0", quantization="fp8")
    assert any(p.startswith("FP8 weights") and "need compute capability 7.5" in p for p in problems)
    # Alternatives that are not a JSON object are ignored, not a crash.
    problems, _ = check_deployment(
        BF16, engine="vllm", compute_capability="7.5", dtype="bfloat16", alternatives_json='["ml.g5.xlarge"]'
    )
    assert problems and "nearest" not in problems[0]


def test_an_empty_or_blank_engine_env_value_states_no_format():
    from preflight.formats import engine_format_settings

    env = {"SM_VLLM_DTYPE": " half ", "SM_VLLM_QUANTIZATION": "  "}
    assert engine_format_settings("SM_VLLM_", env) == {"dtype": "half"}
    assert engine_format_settings("SM_VLLM_", {"SM_VLLM_DTYPE": ""}) == {}


def test_an_engine_whose_keys_are_not_prefix_plus_flag_is_read_by_its_own_keys():
    from preflight.formats import engine_format_settings

    # LMI's quantization is OPTION_QUANTIZE, not OPTION_QUANTIZATION (constructs_lib/data/engines.json preflight_keys).
    env = {"OPTION_QUANTIZE": "fp8", "OPTION_QUANTIZATION": "awq", "OPTION_DTYPE": "fp16"}
    found = engine_format_settings("OPTION_", env, {"quantization": "OPTION_QUANTIZE"})
    assert found == {"dtype": "fp16", "quantization": "fp8"}


def test_an_engine_quantization_flag_fbgemm_fp8_is_the_fp8_row_and_others_stay_as_given():
    # vLLM's --quantization fbgemm_fp8 loads FP8 weights: the fp8 row's minimum applies.
    assert resolve_formats(BF16, quantization="FBGEMM_FP8") == ("bfloat16", "fp8")
    assert resolve_formats(BF16, quantization="AWQ") == ("bfloat16", "awq")


def test_without_a_gpu_name_the_refusal_says_this_gpu():
    from preflight.formats import check_deployment

    problems, _ = check_deployment(BF16, engine="vllm", compute_capability="7.0", quantization="fp8")
    assert "need compute capability 7.5 or newer with vllm; this GPU (compute capability 7.0) cannot" in problems[0]
