"""The documents stay true to the tree: no pointers outside the repository, README's Layout and the paths and
anchors the docs name exist. Each check is a function of text, shown to catch a bad input by its own test."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

#: Suffixes of the files whose text is checked (code, docs, scripts and configuration).
TEXT_SUFFIXES = frozenset({".py", ".lua", ".md", ".sh", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".example"})
TEXT_NAMES = frozenset({"Makefile", "Dockerfile", "run"})
#: Folders never walked: environments, build output, caches, VCS data.
SKIP_DIRS = frozenset({".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"})

#: Pointers at documents that live outside the repository (design notes, measurement notes, issue numbers).
OUTSIDE = re.compile(
    r"design\.md|reference ?§|§ ?\d|reference/|\bissue #?\d|\.\./shared|/work/shared|\bsessions issue",
    re.IGNORECASE,
)
#: Top-level folders a path in the docs may start with.
ROOMS = ("claudeq", "config", "producer", "worker", "simulator", "ops", "tests", "bench", "docs")
#: A repository path inside backticks or a Markdown link target: `worker/run/parse.py`, (../worker/run/parse.py).
DOC_PATH = re.compile(r"(?:`|\((?:\.\./)?)((?:" + "|".join(ROOMS) + r")/[\w./-]*[\w/])(?:::[\w:]*)?[`)#]")
#: A reference to a section of one of our docs: docs/architecture.md#redis-keys, (cli-behaviour.md#stalls-…).
ANCHOR_REF = re.compile(r"(?:docs/)?\b([\w-]+\.md)#([\w-]+)")


def text_files(root: Path = ROOT) -> Iterator[Path]:
    """Every checked text file under `root` (symlinked folders are not followed: each file is seen once)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                yield path


#: A line an unfinished merge leaves behind: `<<<<<<< HEAD`, `=======`, `>>>>>>> branch`.
CONFLICT_MARKER = re.compile(r"^(?:<{7}|>{7})(?: |$)|^={7}$", re.MULTILINE)


def conflict_markers(text: str) -> list[int]:
    """The line numbers of `text` that are merge conflict markers."""
    return [text.count("\n", 0, m.start()) + 1 for m in CONFLICT_MARKER.finditer(text)]


def outside_references(text: str) -> list[str]:
    """The lines of `text` that point at a document outside the repository, numbered."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]


def layout_block(readme: str) -> str:
    """The code block of README's `## Layout` section."""
    section = readme.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def layout_paths(block: str) -> list[str]:
    """Repository paths the Layout block names: each entry (`ops/`) and what its lines name under it (`demo.py`,
    `unit/`), continuation lines belonging to the entry above."""
    paths: list[str] = []
    entry = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            entry = line.split()[0]
            paths.append(entry)
            line = line[len(entry) :]
        for name in re.findall(r"(?<![\w./*-])([\w-]+/|[\w-]+\.(?:py|md|toml|yml|sh))(?![\w*])", line):
            paths.append(entry + name)
    return paths


def missing_layout_paths(block: str, root: Path = ROOT) -> list[str]:
    """Paths the Layout block names that do not exist under `root`."""
    return [p for p in layout_paths(block) if not (root / p).exists()]


def unlisted_top_level(block: str, root: Path = ROOT) -> list[str]:
    """Top-level folders of the tree (not hidden, not generated) the Layout block does not list."""
    listed = {p.rstrip("/") for p in layout_paths(block) if p.count("/") == 1 and p.endswith("/")}
    present = {
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP_DIRS and not p.name.endswith(".egg-info")
    }
    return sorted(present - listed)


def _exists(path: str, root: Path) -> bool:
    # A file users create from a committed template (ops/compose.env from ops/compose.env.example) counts.
    return (root / path).exists() or (root / f"{path}.example").exists()


def missing_doc_paths(text: str, root: Path = ROOT) -> list[str]:
    """Repository paths a document names (in backticks or link targets) that do not exist."""
    return sorted({p for p in DOC_PATH.findall(text) if "*" not in p and not _exists(p, root)})


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of every heading in a Markdown text (code blocks skipped)."""
    out: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(github_anchor(line.lstrip("#")))
    return out


def broken_anchor_refs(text: str, docs: dict[str, str]) -> list[str]:
    """`doc.md#anchor` references in `text` to one of `docs` (name -> Markdown) whose heading does not exist."""
    broken = []
    for name, anchor in ANCHOR_REF.findall(text):
        if name in docs and anchor not in anchors(docs[name]):
            broken.append(f"{name}#{anchor}")
    return broken


def _docs() -> dict[str, str]:
    return {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}


# ---- the repository --------------------------------------------------------------------------------------------


def test_no_file_points_at_a_document_outside_the_repository() -> None:
    found = []
    for path in text_files():
        if path.resolve() == THIS:
            continue
        for hit in outside_references(path.read_text(errors="replace")):
            found.append(f"{path.relative_to(ROOT)}:{hit}")
    assert found == [], "point at docs/architecture.md or docs/cli-behaviour.md instead:\n" + "\n".join(found)


def test_no_file_holds_a_merge_conflict() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in text_files()
        for n in conflict_markers(path.read_text(errors="replace"))
    ]
    assert found == [], "finish the merge: " + ", ".join(found)


def test_every_path_in_readme_layout_exists_and_every_top_level_folder_is_listed() -> None:
    block = layout_block((ROOT / "README.md").read_text())
    assert len(layout_paths(block)) >= 10
    assert missing_layout_paths(block) == []
    assert unlisted_top_level(block) == []


def test_paths_named_in_the_docs_exist() -> None:
    missing = {name: missing_doc_paths(text) for name, text in _docs().items()}
    assert {name: paths for name, paths in missing.items() if paths} == {}


def test_every_reference_to_a_docs_section_finds_its_heading() -> None:
    docs = _docs()
    broken = []
    for path in text_files():
        if path.resolve() == THIS:
            continue
        for ref in broken_anchor_refs(path.read_text(errors="replace"), docs):
            broken.append(f"{path.relative_to(ROOT)}: {ref}")
    assert broken == []


def test_architecture_says_in_one_step_where_status_changes_and_what_decides_a_retry() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    first_table = text.split("## Where to look first", 1)[1].split("\n## ", 1)[0]
    status_row = next(line for line in first_table.splitlines() if "status change" in line)
    retry_row = next(line for line in first_table.splitlines() if "retried" in line)
    assert "job_scripts.py" in status_row and "JobStore" in status_row
    assert "worker/delivery/failure.py" in retry_row


# ---- the checks catch what they are for ------------------------------------------------------------------------


def test_outside_references_are_caught() -> None:
    # Built from parts so this file itself names no outside document.
    design, reference = "DESIGN" + ".md", "reference" + " §4"
    text = f"ok line\n# see {design}, 'Failure policy'\n# measured ({reference})\nfixed in issue 7\n"
    assert [hit.split(":")[0] for hit in outside_references(text)] == ["2", "3", "4"]
    assert outside_references("see docs/cli-behaviour.md#stalls-and-stopping-a-run") == []


def test_conflict_markers_are_caught() -> None:
    text = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> wave3-lua\n| ======= |\n<<<<<<<<\n"
    assert conflict_markers(text) == [2, 4, 6]


def test_a_layout_path_that_does_not_exist_is_caught(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "demo.py").write_text("")
    (tmp_path / "extra").mkdir()
    block = "\nops/     demo.py (`make demo`), probe.py\ngone/    nothing here\n"
    assert missing_layout_paths(block, tmp_path) == ["ops/probe.py", "gone/"]
    assert unlisted_top_level(block, tmp_path) == ["extra"]


def test_a_missing_doc_path_and_a_broken_anchor_are_caught(tmp_path: Path) -> None:
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "failure.py").write_text("")
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "compose.env.example").write_text("")
    text = "`worker/failure.py`, [x](../worker/engine.py), `tests/unit/test_x.py::test_y`, `ops/compose.env`"
    assert missing_doc_paths(text, tmp_path) == ["tests/unit/test_x.py", "worker/engine.py"]
    docs = {"architecture.md": "# Title\n## Claim, lease and fence\n```\n## not a heading\n```\n"}
    refs = "docs/architecture.md#claim-lease-and-fence (architecture.md#not-a-heading) other.md#x"
    assert broken_anchor_refs(refs, docs) == ["architecture.md#not-a-heading"]
