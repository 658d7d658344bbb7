"""claudeq/worker/run/workdirs.py: the project key derived without the SDK is the SDK's, for every kind of path the
fleet meets (the testing kit on the producer install writes transcripts under it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from claude_agent_sdk import project_key_for_directory as sdk_key
from hypothesis import given, settings
from hypothesis import strategies as st

from claudeq.worker.run.workdirs import local_project_key, project_key_for_directory

#: Path parts: plain, punctuated, non-ASCII (composed and decomposed), long enough to pass the 200-character cut.
PARTS = st.text(
    alphabet=st.sampled_from("abcXYZ019-_. ~é\u0065\u0301ßü日本\U0001f600"), min_size=1, max_size=60
).filter(lambda p: p not in (".", "..") and "/" not in p)


@settings(max_examples=300, deadline=None)
@given(st.lists(PARTS, min_size=1, max_size=8))
def test_the_local_key_is_the_sdks(parts: list[str]) -> None:
    path = "/" + "/".join(parts)
    assert local_project_key(path) == sdk_key(path)


@pytest.mark.parametrize("length", [150, 199, 200, 201, 260, 1000])
def test_long_paths_get_the_sdks_hash_suffix(length: int) -> None:
    path = "/" + "d" * (length - 1)
    assert local_project_key(path) == sdk_key(path)
    if length > 200:
        assert len(local_project_key(path)) > 200


def test_a_symlinked_directory_has_the_key_of_its_target(tmp_path: Path) -> None:
    target = tmp_path / "real dir"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    assert local_project_key(tmp_path / "link") == sdk_key(tmp_path / "link") == sdk_key(target)


def test_with_the_sdk_installed_the_sdks_function_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import claude_agent_sdk

    monkeypatch.setattr(claude_agent_sdk, "project_key_for_directory", lambda d=None: "from-the-sdk")
    assert project_key_for_directory("/x") == "from-the-sdk"
