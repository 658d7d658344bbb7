"""The job page's patch sections (producer/web/patch.py): one per file, lines marked, long patches cut."""

from __future__ import annotations

from claudeq.producer.web.patch import sections

PATCH = """diff --git a/README.md b/README.md
index 1111111..2222222 100644
--- a/README.md
+++ b/README.md
@@ -1,2 +1,2 @@
 first line
-second line
+2nd line
diff --git a/new dir/a.txt b/new dir/a.txt
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/new dir/a.txt
@@ -0,0 +1 @@
+-not a removal
"""


def test_a_patch_is_split_per_file_with_its_lines_marked_and_counted() -> None:
    files, cut = sections(PATCH)
    assert not cut
    assert [(f.path, f.added, f.removed) for f in files] == [("README.md", 1, 1), ("new dir/a.txt", 1, 0)]
    assert [k for k, _ in files[0].lines] == ["meta", "meta", "meta", "hunk", "ctx", "del", "add"]
    assert files[1].lines[-1] == ("add", "+-not a removal")


def test_a_long_patch_is_cut_and_says_so() -> None:
    files, cut = sections(PATCH, max_lines=5)
    assert cut and sum(len(f.lines) for f in files) == 5
