"""The Python examples of docs/testing.md and of the README's testing section run as written: each block is executed
with claudeq.testing's names at hand, and each test function it defines is called with a fleet of its own."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import claudeq.testing

ROOT = Path(__file__).resolve().parents[3]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def readme_testing_section() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Testing code that submits jobs")
    return readme[start : readme.index("\n## ", start + 1)]


BLOCKS = [
    *(("docs/testing.md", block) for block in python_blocks((ROOT / "docs" / "testing.md").read_text())),
    *(("README.md", block) for block in python_blocks(readme_testing_section())),
]


@pytest.mark.parametrize(("where", "block"), BLOCKS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BLOCKS)])
def test_the_example_runs(where: str, block: str) -> None:
    namespace: dict[str, Any] = {name: getattr(claudeq.testing, name) for name in claudeq.testing.__all__}
    if block.lstrip().startswith("fleet."):  # a fragment showing one call: run it on a fleet
        with claudeq.testing.fleet() as fleet:
            exec(block, {**namespace, "fleet": fleet})
        return
    exec(block, namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            assert list(inspect.signature(value).parameters) == ["claudeq_fleet"], (where, name)
            with claudeq.testing.fleet() as fleet:
                value(fleet)


def test_there_are_examples() -> None:
    assert len(BLOCKS) >= 4


def test_the_module_doctest_runs_eagerly() -> None:
    import doctest

    import claudeq.testing as kit

    failed, tried = doctest.testmod(kit, verbose=False)
    assert tried >= 3 and failed == 0
