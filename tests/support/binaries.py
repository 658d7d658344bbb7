"""External tools some tests need (installed by .ci/run): skipped locally when missing, a failure under CI=true."""

from __future__ import annotations

import os
import shutil

import pytest


def require_binary(name: str, install_hint: str) -> str:
    """The path of `name`; when it is missing, skip the test locally but fail it in CI (where .ci/run installs it)."""
    found = shutil.which(name)
    if found:
        return found
    message = f"{name} not found: {install_hint}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    raise pytest.skip.Exception(message)
