"""A Hub adapter packed into one model.tar.gz (``Pack``) through CloudFormation's sequences (tests/harness): create,
unrelated update, other patterns, that update rolled back, delete, redeploy. The fake SageMaker runs the real worker
with the job's own arguments, so the archive is packed by hfstage.pack into moto S3."""

from __future__ import annotations

import pytest

from hfstage.manifest import MANIFEST_NAME
from tests.fakes.fixtures import BUCKET, fake_hub, s3  # noqa: F401 - fixtures the driver uses
from tests.handlers import test_failure_paths as paths
from tests.handlers.test_failure_paths import StagingDriver, assert_well_behaved
from tests.harness import stuck

clock, deployed, driver, fake_sagemaker = paths.clock, paths.deployed, paths.driver, paths.fake_sagemaker
STAGING = [pytest.param(StagingDriver, id="staged_checkpoint")]
INCLUDE = ["config.json", "*.safetensors"]


def pack_properties(driver, step: int, **overrides):
    # The construct gives every change of properties its own job-name prefix (a hash of them): so does this.
    settings = {"Pack": "true", "Include": INCLUDE, "Exclude": [], **overrides}
    return driver.properties(JobNamePrefix=f"hfstage-0123456789-{step:010d}-", **settings)


@pytest.mark.parametrize("driver", STAGING, indirect=True)
def test_create_unrelated_update_other_patterns_rolled_back_delete_redeploy(driver):
    cfn = driver.cloudformation()
    created = cfn.create(pack_properties(driver, 1))
    assert created.ok, created.reason
    sha = driver.hub.repos[paths.REPO].sha
    prefix = created.data["Prefix"]
    assert created.physical_id == f"s3://{BUCKET}/{prefix}" and prefix.endswith(f"{sha}-packed/")
    assert driver.s3.body(prefix + "model.tar.gz") and driver.s3.body(prefix + MANIFEST_NAME)
    assert created.data["Revision"] == sha
    jobs = driver.jobs.created

    # Nothing staged changes: answered from the physical ID, the archive verified again, no job.
    updated = cfn.update(pack_properties(driver, 2, MaxInstances="8"))
    assert updated.ok and updated.physical_id == created.physical_id and driver.jobs.created == jobs
    assert updated.data["Revision"] == sha

    # Other patterns are another archive: a job packs it; the update fails later and is rolled back.
    driver.jobs.script = stuck
    other = cfn.update(pack_properties(driver, 3, Include=["config.json"]))
    assert other.ok, other.reason
    assert driver.running() == [other.data["JobName"]]
    rolled_back = cfn.rollback()
    assert rolled_back.ok and rolled_back.physical_id == created.physical_id, rolled_back.reason
    assert driver.running() == []  # the failed update's job is stopped
    assert driver.s3.body(prefix + "model.tar.gz")  # the serving archive is untouched

    deleted = cfn.delete()
    assert deleted.ok
    assert driver.s3.list_keys(prefix)  # the staged archive is kept for the next deploy
    assert_well_behaved(cfn, created, updated, other, rolled_back, deleted)

    # Redeploy after delete: the kept archive is verified and reused, no job.
    before = driver.jobs.created
    again = driver.cloudformation()
    redeployed = again.create(pack_properties(driver, 1))
    assert redeployed.ok and redeployed.physical_id == created.physical_id, redeployed.reason
    assert redeployed.data["JobName"] == "" and driver.jobs.created == before
