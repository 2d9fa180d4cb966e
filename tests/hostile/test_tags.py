"""Hostile tags (issue 34, item 8): a tag AWS would refuse at deploy is refused at synth, by the construct that puts
it on a resource (StagedCheckpoint, constructs_lib/tags.py) and, naming the context key, by the context layer.

AWS's rule (Tagging AWS Resources user guide, "Tag naming limits and requirements"; botocore sagemaker
service-2.json TagKey/TagValue ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``): keys 1-128, values 0-256 characters, no ``aws:``
key, each key once per resource. A staging job's own tags (``hf-repo-id``: the repository or archive URI;
``hf-revision``) are tags too, so a user tag may not take their keys and an archive URI must be a tag value.
"""

from __future__ import annotations

import json
import string
import unicodedata

import aws_cdk as cdk
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs_lib import Refusal, StagedCheckpoint
from constructs_lib.deployment.config import ConfigError, DeploymentConfig
from constructs_lib.deployment.fleet import fleet_from_context
from constructs_lib.tags import MAX_TAGS, is_tag_text, job_source_problem, tag_problems
from handler_kit.resources import JOB_TAG_KEYS
from tests.conftest import context_with
from tests.hostile.tally import Tally, report_fixture

TALLY = Tally()
_report_tally = report_fixture(TALLY)
BOUNDED = settings(max_examples=80, deadline=None, database=None)
ARCHIVE = "s3://my-models/train/output/model.tar.gz"
# Characters AWS refuses in a tag, as users paste them (S3 keys allow them all).
REFUSED = "()#!$%&*,;<>?[]{}|~^`'\"\\"


def context_problems(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as info:
        DeploymentConfig.from_context(context_with(**overrides))
    return info.value.problems


# --- the rule itself: boundaries ---


@pytest.mark.parametrize(("length", "refused"), [(1, False), (128, False), (129, True)])
def test_a_key_is_at_most_128_characters(length, refused):
    found = tag_problems({"k" * length: "v"})
    TALLY.record("tag key length", bool(found))
    assert bool(found) is refused, found
    if refused:
        assert found == [
            f"tag key {'k' * 60 + '...'!r} is 129 characters; allowed: 1-128 letters, digits, spaces and "
            "_ . : / = + - @"
        ]


def test_an_empty_key_is_refused():
    assert tag_problems({"": "v"}) == [
        "tag key '' is 0 characters; allowed: 1-128 letters, digits, spaces and _ . : / = + - @"
    ]


@pytest.mark.parametrize(("length", "refused"), [(0, False), (256, False), (257, True)])
def test_a_value_is_at_most_256_characters(length, refused):
    found = tag_problems({"owner": "v" * length})
    TALLY.record("tag value length", bool(found))
    assert bool(found) is refused, found
    if refused:
        assert "is 257 characters; allowed: 0-256" in found[0], found


@pytest.mark.parametrize("key", ["aws:owner", "AWS:owner", "Aws:cost"])
def test_keys_starting_with_aws_in_any_case_are_refused(key):
    assert tag_problems({key: "x"}) == [f"tag key {key!r}: keys starting with aws: are reserved for AWS"]


@pytest.mark.parametrize("key", JOB_TAG_KEYS)
def test_a_user_tag_may_not_take_a_key_the_staging_job_sets(key):
    (found,) = tag_problems({key: "mine"})
    assert found.startswith(f"tag key {key!r}: the staging job sets it itself (hf-repo-id, hf-revision)"), found
    # Tag keys are case-sensitive (the same guide): another case is another key.
    assert tag_problems({key.upper(): "mine"}) == []


@pytest.mark.parametrize(("count", "refused"), [(MAX_TAGS, False), (MAX_TAGS + 1, True)])
def test_at_most_48_tags_beside_the_jobs_two(count, refused):
    assert MAX_TAGS == 48
    found = tag_problems({f"k{i}": "v" for i in range(count)})
    assert bool(found) is refused
    if refused:
        assert found == ["49 tags; allowed: at most 48 (50 a resource, 2 of them its own)"]


@pytest.mark.parametrize("char", REFUSED)
def test_each_refused_character_is_named_in_a_value_and_refused_in_a_key(char):
    (in_value,) = tag_problems({"owner": f"team{char}a"})
    assert f"holds {char!r}; allowed: 0-256" in in_value, in_value
    assert tag_problems({f"team{char}": "a"}), char
    TALLY.record("refused character", True)


def test_every_problem_is_reported_at_once():
    found = tag_problems({"aws:x": "ok", "ok": "a#b", "hf-revision": "(", "k" * 129: "v"})
    assert len(found) == 5, found


# --- property-based: the allowed alphabet passes, anything outside it is refused ---

_ALLOWED = st.characters(categories=("L", "N", "Zs"), exclude_characters="\x00") | st.sampled_from("_.:/=+-@")


@BOUNDED
@given(key=st.text(_ALLOWED, min_size=1, max_size=128), value=st.text(_ALLOWED, max_size=256))
def test_any_key_and_value_of_allowed_characters_pass(key, value):
    if key.lower().startswith("aws:") or key in JOB_TAG_KEYS:
        return
    assert tag_problems({key: value}) == [], (key, value)
    TALLY.record("allowed tag", False)


@BOUNDED
@given(
    prefix=st.text(string.ascii_letters, max_size=20),
    bad=st.characters(categories=("P", "S", "C", "M")).filter(lambda c: c not in "_.:/=+-@"),
)
def test_any_character_outside_letters_numbers_separators_and_the_punctuation_is_refused(prefix, bad):
    assert not unicodedata.category(bad).startswith(("L", "N", "Z"))
    assert not is_tag_text(bad)
    assert tag_problems({"k": prefix + bad}), repr(bad)
    TALLY.record("hostile tag value", True)


# --- the construct refuses (the library user gets the check too) ---


def checkpoint(**props) -> StagedCheckpoint:
    return StagedCheckpoint(cdk.Stack(cdk.App(), "S"), "Checkpoint", **props)


def test_the_construct_refuses_bad_tags_naming_the_prop_key_and_value():
    with pytest.raises(Refusal) as info:
        checkpoint(repo_id="Qwen/Qwen3-0.6B", tags={"hf-repo-id": "mine", "cost": "a(b)"})
    assert info.value.subject == "StagedCheckpoint S/Checkpoint"
    assert info.value.problems == [
        "tags: tag key 'hf-repo-id': the staging job sets it itself (hf-repo-id, hf-revision), and a resource takes "
        "each key once; choose another key",
        "tags: tag 'cost'='a(b)' holds '(', ')'; allowed: 0-256 letters, digits, spaces and _ . : / = + - @",
    ]


@pytest.mark.parametrize("uri", ["s3://my-models/run(1)/model.tar.gz", "s3://my-models/run#1/model.tar.gz"])
def test_the_construct_refuses_an_archive_uri_its_job_tag_cannot_hold(uri):
    with pytest.raises(Refusal) as info:
        checkpoint(source_s3_uri=uri)
    (problem,) = info.value.problems
    assert problem.startswith(f"source_s3_uri={uri!r}: the staging job's tag hf-repo-id holds it, and AWS refuses"), (
        problem
    )


def test_a_uri_is_checked_as_far_as_the_tag_holds_it():
    # The handler tags the first 256 characters (staging_job.py): a '(' beyond them never reaches the tag.
    head = "s3://my-models/" + "a" * (256 - len("s3://my-models/"))
    assert job_source_problem(head + "(x).tar.gz") is None
    assert job_source_problem(head[:-1] + "(x).tar.gz") is not None


def test_good_tags_and_archive_pass_and_reach_the_resource():
    made = checkpoint(source_s3_uri=ARCHIVE, tags={"team": "llm-ops", "cost center": "ü 42"})
    properties = cdk.assertions.Template.from_stack(cdk.Stack.of(made)).find_resources("Custom::StagedCheckpoint")
    (resource,) = properties.values()
    assert resource["Properties"]["Tags"] == [
        {"Key": "team", "Value": "llm-ops"},
        {"Key": "cost center", "Value": "ü 42"},
    ]


# --- the context layer names the context key ---


def test_context_tags_name_the_key():
    (problem,) = context_problems(tags=json.dumps({"hf-revision": "x"}))
    assert problem.startswith("tags='{\"hf-revision\": \"x\"}': tag key 'hf-revision': the staging job sets it"), (
        problem
    )


def test_context_archive_names_model_s3_uri():
    uri = "s3://my-models/run(1)/model.tar.gz"
    (problem,) = context_problems(model_s3_uri=uri)
    assert problem.startswith(f"model_s3_uri={uri!r}: the staging job's tag hf-repo-id holds it"), problem


def test_a_fleet_deployment_archive_is_named_with_its_deployment():
    uri = "s3://my-models/run#1/model.tar.gz"
    with pytest.raises(ConfigError) as info:
        fleet_from_context(context_with(), {"chat": {"model_s3_uri": uri}})
    (problem,) = info.value.problems
    assert problem.startswith(f"deployments.chat.model_s3_uri={uri!r}: the staging job's tag hf-repo-id"), problem


def test_a_served_prefix_is_no_tag_and_keeps_its_characters():
    # A prefix served as it is (not an archive) starts no staging job: no tag holds it.
    config = DeploymentConfig.from_context(context_with(model_s3_uri="s3://my-models/run(1)/"))
    assert config.model_s3_uri == "s3://my-models/run(1)/"
