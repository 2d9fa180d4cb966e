"""Every integer setting at both ends of its range: the limit itself passes, one beyond it is refused.

A range check off by one at the top (``<`` for ``<=``) refuses the one value a user picks to be safe
(``startup_timeout_s=3600``, the API's maximum); no other test gives a setting its maximum. Where the
limit is an AWS API limit, the botocore service model is the source and is checked here too.
"""

from __future__ import annotations

import botocore.session
import pytest

from tests.stacks.test_config import load, problems_of

# key -> (lowest, highest, companion settings the cross-key guards need, by value)
SCALE_TO_ZERO = {"deployment_mode": "inference-component", "scale_to_zero": True}
INTEGER_SETTINGS = {
    "startup_timeout_s": (60, 3600, {}),
    "download_timeout_s": (60, 3600, {}),
    "instance_count": (1, 100, {}),
    "staging_max_instances": (1, 100, {}),
    "staging_max_runtime_s": (60, 42300, {}),  # the construct's range (STAGING_MAX_RUNTIME_RANGE_S)
    "smoke_budget_s": (60, 2700, {}),
    "smoke_max_tokens": (1, 4096, {}),
    "preflight_sequences": (1, 4096, {}),
    "max_model_len": (1, 16_777_216, {}),
    "max_num_seqs": (1, 65_536, {}),
    "max_instances": (1, 100, {}),
    "min_instances": (
        0,
        100,
        {0: SCALE_TO_ZERO, -1: SCALE_TO_ZERO, 100: {"max_instances": 100, "instance_count": 100}, 101: {}},
    ),
}


@pytest.mark.parametrize("key", sorted(INTEGER_SETTINGS))
def test_each_end_of_the_range_is_accepted(key: str) -> None:
    low, high, companions = INTEGER_SETTINGS[key]
    for value in (low, high, str(high)):  # text from `-c key=value` too
        config = load(**{key: value, **companions.get(int(value), {})})
        assert getattr(config, key) == int(value)


@pytest.mark.parametrize("key", sorted(INTEGER_SETTINGS))
def test_one_beyond_either_end_is_refused_naming_the_range(key: str) -> None:
    low, high, companions = INTEGER_SETTINGS[key]
    for value in (low - 1, high + 1):
        problems = problems_of(**{key: value, **companions.get(value, {})})
        assert any(p.startswith(f"{key}={value}: out of range; allowed: {low} to {high}") for p in problems), problems


SAGEMAKER = botocore.session.get_session().get_service_model("sagemaker")


@pytest.mark.parametrize(
    ("key", "shape"),
    [
        ("startup_timeout_s", "ProductionVariantContainerStartupHealthCheckTimeoutInSeconds"),
        ("download_timeout_s", "ProductionVariantModelDataDownloadTimeoutInSeconds"),
        ("staging_max_instances", "ProcessingInstanceCount"),
    ],
)
def test_api_limits_are_the_botocore_models(key: str, shape: str) -> None:
    low, high, _ = INTEGER_SETTINGS[key]
    limits = SAGEMAKER.shape_for(shape).metadata
    assert (low, high) == (limits["min"], limits["max"])


def test_staging_runtime_fits_the_wait_condition_and_the_processing_api() -> None:
    _, high, _ = INTEGER_SETTINGS["staging_max_runtime_s"]
    # AWS::CloudFormation::WaitCondition Timeout is at most 43200 s (CloudFormation WaitCondition docs); the
    # job must end, and its state change signal arrive, before the wait condition gives up.
    assert high < 43200
    assert high <= SAGEMAKER.shape_for("ProcessingMaxRuntimeInSeconds").metadata["max"]
