"""The engine's capabilities: the Dagster resources satisfy them as they are, and a mapping of
resources that lacks one is refused naming it."""

from __future__ import annotations

import dataclasses

import pytest

from evalrunner_assets.errors import InputError
from evalrunner_assets.pipeline.capabilities import (
    EngineOptions,
    EngineResources,
    LakeOpener,
    RepoStore,
    ResourceMissing,
    SandboxProvider,
    WorkerCounter,
)
from evalrunner_assets.pipeline.publish import ReportPoster
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource, default_resources


def test_the_dagster_resources_have_every_capability_the_engine_uses() -> None:
    assert isinstance(LakeResource(), LakeOpener)
    assert isinstance(SandboxResource(), SandboxProvider) and isinstance(SandboxResource(), WorkerCounter)
    assert isinstance(RepoResource(), RepoStore)
    assert isinstance(GitHubResource(), ReportPoster)


def test_the_default_resources_convert_with_github_as_the_report_poster() -> None:
    resources = EngineResources.from_mapping(default_resources())
    assert isinstance(resources.lake, LakeResource) and isinstance(resources.github, GitHubResource)


def test_a_github_that_posts_nothing_is_left_out() -> None:
    resources = EngineResources.from_mapping({**default_resources(), "github": object()})
    assert resources.github is None


@pytest.mark.parametrize("name", ["lake", "sandbox", "repos"])
def test_a_missing_or_wrong_resource_is_refused_naming_it(name: str) -> None:
    missing = {k: v for k, v in default_resources().items() if k != name}
    with pytest.raises(ResourceMissing, match=f"resource '{name}': .* got nothing") as raised:
        EngineResources.from_mapping(missing)
    assert isinstance(raised.value, InputError)
    with pytest.raises(ResourceMissing, match=f"resource '{name}': .* got a str"):
        EngineResources.from_mapping({**default_resources(), name: "not a resource"})


def test_engine_options_default_to_what_evalrunner_compare_runs_with() -> None:
    options = EngineOptions()
    assert (options.packed, options.retry_failed, options.lease_wait, options.report_at_start) == (
        True,
        True,
        True,
        False,
    )
    assert options.stop is None and options.workers is None  # each engine makes its own stop event
    with pytest.raises(dataclasses.FrozenInstanceError):  # one object may serve several runs
        options.packed = False
