"""Coding jobs with the real CLI: each job in a git worktree of its own, its change back as a diff and a branch.

Real worker processes (as root: each run under a uid of its own, in its sandbox), the real CLI, the simulator
scripting the edits with Bash and Write tool calls (docs/simulator.md). Jobs on one repository see only their own
worktree; each record's diff holds exactly its edits and its branch exists with them; a failed attempt leaves its
partial change and its retry starts from `ref`; two conversation turns build on one branch; a patch over the
record's cap comes back whole from the transcript archive, or as the stat and the branch without one
(docs/jobs.md#coding-jobs).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.errors import JobSpecError
from claudeq.models import JobRecord
from claudeq.producer.client import AsyncClient, Client
from tests.conftest import make_settings
from tests.e2e.conftest import WorkerFactory
from tests.support.archive import archive_url
from tests.support.binaries import require_binary
from tests.support.run_dirs import group_workspace, open_base
from tests.support.tree import ROOT
from tests.support.webdriver import Browser
from tests.support.worker_proc import FAST_E2E, settings_env, worker_env

pytestmark = pytest.mark.e2e

WORKSPACE_GID = 62511  # the runs' shared group (outside the default run uid range 61000-61999)


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def base() -> Iterator[Path]:
    with open_base("cqt-coding-") as path:
        yield path


@pytest.fixture
def root(base: Path) -> Path:
    return group_workspace(base / "ws", WORKSPACE_GID)


@pytest.fixture
def repo(root: Path) -> Path:
    """A repository with one commit on `main`: README.md holding two lines."""
    path = root / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("first line\nsecond line\n")
    _git(path, "add", "README.md")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    return path


@pytest.fixture
def settings(redis_url: str, unique: str, accounts_file: Path, base: Path, root: Path) -> Settings:
    policy = WorkerPolicy(
        allowed_tools=["Read", "Glob", "Grep", "Edit", "Write", "Bash"],
        workspace_roots=[root],
        run_groups=[WORKSPACE_GID],
    )
    return make_settings(
        redis_url, unique, accounts_file=accounts_file, run_root=base / "runs", policy=policy, **FAST_E2E
    )


def _bash(command: str) -> str:
    return "[[sim: tool Bash " + json.dumps({"command": command, "description": "edit"}) + "]]"


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "claudeq.producer.cli", *args]
    env = worker_env(settings, [])
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def _tool_results(client: Client, job_id: str) -> list[str]:
    return [str(e.data["text"]) for e in client.events(job_id) if e.type == "tool_result"]


def _done(client: Client, job_id: str) -> JobRecord:
    record = client.wait(job_id, timeout=180, poll_s=0.2)
    assert record.status == "succeeded", (record.status, record.error)
    return record


def test_three_jobs_on_one_repository_each_see_only_their_own_worktree(
    client: Client, workers: WorkerFactory, repo: Path, unique: str, settings: Settings
) -> None:
    workers()
    jobs = []
    for n in range(3):
        command = (
            f"echo job-{n}-{unique} > mine-{n}.txt && printf 'third {n}\\n' >> README.md && ls -a . .."
            " && echo uid $(id -u) $(stat -c %u .)"
        )
        jobs.append(
            client.submit(
                prompt=f"{_bash(command)} edit {n} {unique}",
                tools="shell",
                workspace={"repo": str(repo), "keep": n == 0},
                metadata={"commit_message": f"job {n} edits"},
            )
        )
    records = [_done(client, job.id) for job in jobs]
    for n, (job, record) in enumerate(zip(jobs, records, strict=True)):
        [listing] = _tool_results(client, job.id)
        others = {f"mine-{m}.txt" for m in range(3)} - {f"mine-{n}.txt"}
        assert f"mine-{n}.txt" in listing and "README.md" in listing, listing
        assert not any(other in listing for other in others), listing  # nor any other worktree beside its own
        [uids] = [line.split()[1:] for line in listing.splitlines() if line.startswith("uid ")]
        assert uids[0] == uids[1] != "0", listing  # the worktree is the run's own, and the run is not root
        change = record.workspace
        assert change is not None and change.branch == f"claudeq/{job.id}"
        assert (change.files, change.insertions, change.deletions) == (2, 2, 0)
        assert change.patch is not None
        assert f"+job-{n}-{unique}" in change.patch and f"+third {n}" in change.patch
        assert not any(f"mine-{m}.txt" in change.patch for m in range(3) if m != n)
        # Its branch holds its edits, committed with the message it asked for.
        assert _git(repo, "show", f"{change.branch}:mine-{n}.txt") == f"job-{n}-{unique}\n"
        assert _git(repo, "log", "-1", "--format=%s", change.branch).strip() == f"job {n} edits"
        assert change.commit == _git(repo, "rev-parse", change.branch).strip()
        assert record.attempts[-1].change is not None and record.attempts[-1].change.commit == change.commit
    # The main checkout never saw any of it; only the kept worktree is left.
    assert sorted(p.name for p in repo.iterdir() if p.name != ".git") == ["README.md"]
    assert _git(repo, "status", "--porcelain") == ""
    kept = records[0].workspace
    assert kept is not None and kept.worktree is not None and (Path(kept.worktree) / "mine-0.txt").is_file()
    assert [w for w in _git(repo, "worktree", "list", "--porcelain").splitlines() if w.startswith("worktree ")] == [
        f"worktree {repo}",
        f"worktree {kept.worktree}",
    ]
    # The same change through every front end: the clients, the public record (MCP get_job, webhooks), the CLI.
    assert asyncio.run(AsyncClient(client=client).diff(jobs[0].id)) == kept
    assert client.get(jobs[0].id).public()["workspace"]["patch"] == kept.patch
    shown = _cli(settings, "diff", jobs[0].id)
    assert (shown.returncode, shown.stdout) == (0, kept.patch), shown.stderr
    stat = _cli(settings, "diff", jobs[0].id, "--stat")
    assert stat.stdout.startswith("2 file(s) changed, 2 insertion(s)(+), 0 deletion(s)(-)"), stat.stdout
    assert f"on claudeq/{jobs[0].id}" in stat.stdout
    listed = json.loads(_cli(settings, "workspaces", "list", "--json").stdout)
    assert listed == [{"path": kept.worktree, "repo": str(repo), "job_id": jobs[0].id}]
    pruned = json.loads(_cli(settings, "workspaces", "prune", "--json").stdout)
    assert pruned == {"removed": [kept.worktree]} and not Path(kept.worktree).exists()
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert _git(repo, "show", f"claudeq/{jobs[0].id}:mine-0.txt") == f"job-0-{unique}\n"  # the branch stays


def test_the_command_line_submits_a_coding_job_and_prints_its_diff(
    workers: WorkerFactory, repo: Path, unique: str, settings: Settings
) -> None:
    workers()
    _git(repo, "branch", "base")
    prompt = f"{_bash('echo cli > cli.txt')} cli {unique}"
    args = ["--tools", "shell", "--workspace", str(repo), "--ref", "base", "--concurrency-key", f"repo:{repo}"]
    done = _cli(settings, "submit", prompt, *args, "--wait", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(done.stdout)
    assert record["spec"]["workspace"] == {"repo": str(repo), "ref": "base"}
    assert record["spec"]["concurrency_key"] == f"repo:{repo}"
    assert record["workspace"]["ref"] == "base" and "+cli" in record["workspace"]["patch"]
    status = _cli(settings, "status", record["id"])
    assert "change" in status.stdout and "1 file(s) changed, 1 insertion(s)(+)" in status.stdout, status.stdout
    shown = _cli(settings, "diff", record["id"], "--json", "--stat")
    assert json.loads(shown.stdout)["files"] == 1 and "patch" not in json.loads(shown.stdout)
    refused = _cli(settings, "submit", "p", "--ref", "main", "--json")
    assert refused.returncode == 2 and json.loads(refused.stdout)["fields"][0]["field"] == "--ref"


PATCH_CAP = 2000  # bytes of patch a record keeps in these tests


def _big_and_small(client: Client, repo: Path, unique: str) -> tuple[JobRecord, JobRecord]:
    """Two coding jobs: one writing ~20 kB (over PATCH_CAP), one writing a line."""
    big = f"seq 1 1500 | sed 's/$/ {unique}/' > big.txt"
    jobs = [
        client.submit(prompt=f"{_bash(command)} {name} {unique}", tools="shell", workspace={"repo": str(repo)})
        for name, command in (("big", big), ("small", "echo small > small.txt"))
    ]
    return _done(client, jobs[0].id), _done(client, jobs[1].id)


def test_a_patch_over_the_cap_comes_back_whole_from_the_archive(
    workers: WorkerFactory, repo: Path, unique: str, settings: Settings, tmp_path: Path
) -> None:
    cfg = settings.model_copy(
        update={"archive_url": archive_url("sqlite", tmp_path), "workspace_patch_max_bytes": PATCH_CAP}
    )
    workers(archive_url=cfg.archive_url, workspace_patch_max_bytes=PATCH_CAP)
    client = Client(cfg)
    assert client.store.archive is not None
    try:
        big, small = _big_and_small(client, repo, unique)
        assert big.workspace is not None and big.workspace.truncated and big.workspace.patch_archived
        assert big.workspace.patch_z is None  # the record keeps the stat and the branch only
        whole = _git(repo, "diff", "--binary", big.workspace.ref_commit, big.workspace.branch)
        assert len(whole.encode()) > PATCH_CAP and f"+1500 {unique}" in whole
        change = client.diff(big.id)
        assert change is not None and change.patch == whole and change.files == 1 and change.insertions == 1500
        async_change = asyncio.run(AsyncClient(client=client).diff(big.id))
        assert async_change is not None and async_change.patch == whole
        shown = _cli(cfg, "diff", big.id)
        assert shown.returncode == 0 and shown.stdout == whole, shown.stderr
        assert "read from the transcript archive" in " ".join(shown.stderr.split())
        as_json = json.loads(_cli(cfg, "diff", big.id, "--json").stdout)
        assert as_json["patch"] == whole and as_json["patch_archived"] is True
        assert small.workspace is not None and small.workspace.patch_z is not None  # under the cap: in the record
        assert not small.workspace.patch_archived and not small.workspace.truncated
        assert client.store.archive.get_patch(cfg.key_prefix, small.id) is None
        shown = _cli(cfg, "diff", small.id)
        assert "+small" in shown.stdout and "archive" not in shown.stderr
        with _serve(cfg, tmp_path) as web:
            page = httpx.get(f"{web}/jobs/{big.id}", headers=AUTH, timeout=30).text
        assert 'id="change-archived"' in page and 'data-path="big.txt"' in page and f"+1 {unique}" in page
    finally:
        client.store.archive.drop(cfg.key_prefix)


def test_without_an_archive_a_patch_over_the_cap_leaves_the_stat_and_the_branch(
    workers: WorkerFactory, repo: Path, unique: str, settings: Settings
) -> None:
    cfg = settings.model_copy(update={"workspace_patch_max_bytes": PATCH_CAP})
    workers(workspace_patch_max_bytes=PATCH_CAP)
    client = Client(cfg)
    big, _ = _big_and_small(client, repo, unique)
    change = client.diff(big.id)
    assert change is not None and change.truncated and not change.patch_archived and change.patch is None
    assert (change.files, change.insertions) == (1, 1500)
    assert f"+1500 {unique}" in _git(repo, "diff", change.ref_commit, change.branch)  # the branch holds it all
    shown = _cli(cfg, "diff", big.id)
    assert shown.returncode == 0 and shown.stdout.startswith("1 file(s) changed, 1500 insertion(s)(+)")
    assert f"on {change.branch}" in shown.stdout and f"see branch {change.branch}" in " ".join(shown.stderr.split())


def test_bad_workspaces_are_refused_at_submit_with_the_field(
    client: Client, repo: Path, root: Path, base: Path
) -> None:
    plain = root / "plain"
    plain.mkdir()
    cases = {
        "workspace.repo": {"repo": str(base / "elsewhere")},
        "workspace.ref": {"repo": str(repo), "ref": "no-such-ref"},
    }
    _git(repo, "branch", "taken")
    for field, workspace in [*cases.items(), ("workspace.branch", {"repo": str(repo), "branch": "taken"})]:
        with pytest.raises(JobSpecError) as refused:
            client.submit(prompt="p", tools="shell", workspace=workspace)
        assert field in [f for f, _ in refused.value.errors], refused.value.errors
    with pytest.raises(JobSpecError) as refused:
        client.submit(prompt="p", tools="shell", workspace={"repo": str(plain)})
    assert refused.value.errors == [
        ("workspace.repo", f"{plain} is not a git repository (a work tree's top or a bare repository)")
    ]
    with pytest.raises(JobSpecError) as refused:
        client.submit(prompt="p", tools="shell", workspace={"repo": str(repo)}, cwd=str(root))
    assert [f for f, _ in refused.value.errors] == ["workspace"]


def test_a_failed_attempt_leaves_its_partial_change_and_its_retry_starts_from_ref(
    client: Client, workers: WorkerFactory, repo: Path, unique: str
) -> None:
    workers()
    ref = _git(repo, "rev-parse", "main").strip()
    edit = _bash("test -e partial.txt && echo dirty || echo clean; echo partial > partial.txt")
    # The first attempt edits, then its next request fails (a transient error: retried).
    prompt = f"{edit} {_bash('ls -a')} [[sim: error 500 after=1 times=1]] {unique}"
    job = client.submit(prompt=prompt, tools="shell", workspace={"repo": str(repo)}, max_attempts=3)
    record = _done(client, job.id)
    assert [a.outcome for a in record.attempts] == ["transient_error", "success"]
    first, second = (a.change for a in record.attempts)
    assert first is not None and first.files == 1 and first.commit is not None
    assert _git(repo, "show", f"{first.commit}:partial.txt") == "partial\n"  # the partial change, committed
    # The retry continued the session (its next tool call, `ls`) in a worktree fresh from `ref`.
    results = _tool_results(client, job.id)
    assert [r.split() for r in results] == [["clean"], [".", "..", ".git", "README.md"]], results
    # The retry began at `ref`: the job's change is the second attempt's, and the branch holds no partial edit.
    change = record.workspace
    assert change is not None and second is not None
    assert (change.base, change.ref_commit) == (ref, ref)
    assert (change.files, change.commit, second.files, second.commit) == (0, None, 0, None)
    assert _git(repo, "rev-parse", change.branch).strip() == ref


def test_two_conversation_turns_build_on_one_branch(
    client: Client, workers: WorkerFactory, repo: Path, unique: str
) -> None:
    workers()
    conversation = f"refactor-{unique}"
    workspace = {"repo": str(repo)}
    one = client.submit(
        prompt=f"{_bash('echo one > turns.txt')} turn one {unique}",
        tools="shell",
        workspace=workspace,
        conversation=conversation,
    )
    first = _done(client, one.id).workspace
    two = client.submit(
        prompt=f"{_bash('cat turns.txt; echo two >> turns.txt')} turn two {unique}",
        tools="shell",
        workspace=workspace,
        conversation=conversation,
    )
    second = _done(client, two.id).workspace
    assert first is not None and second is not None and first.branch == second.branch
    assert _tool_results(client, two.id)[0].strip() == "one"  # the second turn found the first one's edit
    assert second.base == first.commit
    assert _git(repo, "show", f"{second.branch}:turns.txt") == "one\ntwo\n"
    assert second.patch is not None and "+one\n+two" in second.patch  # against `ref`: both turns


def test_a_ref_gone_before_the_run_fails_the_job_once_with_kind_workspace(
    client: Client, workers: WorkerFactory, repo: Path, unique: str
) -> None:
    _git(repo, "branch", "feature")
    job = client.submit(prompt=f"edit {unique}", tools="shell", workspace={"repo": str(repo), "ref": "feature"})
    _git(repo, "branch", "-D", "feature")  # gone before any worker takes the job
    workers()
    record = client.wait(job.id, timeout=120, poll_s=0.2)
    assert record.status == "failed" and record.error is not None
    assert (record.error.kind, record.error.retryable) == ("workspace", False)
    assert record.error.message == f"workspace.ref: 'feature' names no commit in {repo}"
    assert [a.outcome for a in record.attempts] == ["failed"]
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_files_written_under_the_outputs_folder_come_back_byte_for_byte(
    client: Client, workers: WorkerFactory, repo: Path, unique: str, settings: Settings, base: Path, web: str
) -> None:
    workers(artifact_max_bytes=1000)
    command = (
        'cd "$CLAUDEQ_OUTPUTS" && printf "\\000\\001\\377bin" > report.bin && mkdir -p sub'
        f" && echo note-{unique} > sub/note.txt && head -c 2000 /dev/zero > big.bin && ln -s /etc/passwd link.txt"
    )
    job = client.submit(prompt=f"{_bash(command)} outputs {unique}", tools="shell", workspace={"repo": str(repo)})
    record = _done(client, job.id)
    assert record.artifacts is not None
    assert [(a.name, a.size) for a in record.artifacts.files] == [
        ("report.bin", 6),
        ("sub/note.txt", len(f"note-{unique}\n")),
    ]
    assert sorted(record.artifacts.dropped) == ["big.bin", "link.txt"]  # over the cap; not a regular file
    assert client.artifact(job.id, "report.bin") == b"\x00\x01\xffbin"
    out = base / "fetched"
    fetched = _cli(settings, "artifacts", job.id, "--out", str(out))
    assert fetched.returncode == 0, fetched.stderr
    assert (out / "report.bin").read_bytes() == b"\x00\x01\xffbin"
    assert (out / "sub" / "note.txt").read_text() == f"note-{unique}\n"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == ["report.bin", "sub/note.txt"]
    assert "report.bin" in _cli(settings, "artifacts", job.id).stdout
    # The web page links them; a link downloads the bytes (never rendered), an unknown name is a 404.
    page = httpx.get(f"{web}/jobs/{job.id}", headers=AUTH, timeout=30).text
    assert f'href="/jobs/{job.id}/artifacts/sub/note.txt"' in page and "big.bin (not kept)" in page
    got = httpx.get(f"{web}/jobs/{job.id}/artifacts/report.bin", headers=AUTH, timeout=30)
    assert (got.status_code, got.content) == (200, b"\x00\x01\xffbin")
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"].startswith("attachment")
    assert httpx.get(f"{web}/jobs/{job.id}/artifacts/big.bin", headers=AUTH, timeout=30).status_code == 404


WEB_TOKEN = "cqt-coding-operator"  # the web page's operator token in these tests
AUTH = {"Authorization": f"Bearer {WEB_TOKEN}"}


@contextmanager
def _serve(settings: Settings, folder: Path) -> Iterator[str]:
    """`claudeq web` as its own process (on loopback, the operator's token WEB_TOKEN); yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = (folder / "web.log").open("wb")
    command = [sys.executable, "-m", "claudeq.producer.cli", "web", "--port", str(port)]
    settings = settings.model_copy(update={"web_token": SecretStr(WEB_TOKEN)})
    env = {**worker_env(settings, []), **settings_env(settings)}
    proc = subprocess.Popen(command, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (folder / "web.log").read_text()
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def web(settings: Settings, tmp_path: Path) -> Iterator[str]:
    with _serve(settings, tmp_path) as base:
        yield base


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Headless chromium from Debian's packages."""
    chromium = require_binary("chromium", "apt-get install chromium chromium-driver")
    chromedriver = require_binary("chromedriver", "apt-get install chromium-driver")
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
    driver = Browser(chromium, chromedriver, tmp_path / "chromium", flags)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_job_page_shows_the_patch_file_by_file(
    client: Client, workers: WorkerFactory, repo: Path, unique: str, web: str, browser: Browser
) -> None:
    workers()
    command = f"echo '<b>{unique}</b>' > page.html && sed -i 's/second line/2nd line/' README.md"
    job = client.submit(prompt=f"{_bash(command)} web {unique}", tools="shell", workspace={"repo": str(repo)})
    _done(client, job.id)
    browser.get(f"{web}/login")
    browser.find("#token").send_keys(WEB_TOKEN)
    browser.find("#login").click()
    browser.until(lambda d: d.find_all("#jobs"))
    browser.get(f"{web}/jobs/{job.id}")
    browser.until(lambda d: d.find_all("#change"))
    assert browser.find("#change-stat").text.startswith("2 file(s) · +2 -1 · branch claudeq/")
    files = browser.find_all("#change details.patch-file")
    assert [f.attribute("data-path") for f in files] == ["README.md", "page.html"]
    readme = [(e.attribute("class"), e.text) for e in browser.find_all('details[data-path="README.md"] .pl')]
    assert ("pl pl-del", "-second line") in readme and ("pl pl-add", "+2nd line") in readme
    assert ("pl pl-ctx", " first line") in readme
    page = [e.text for e in browser.find_all('details[data-path="page.html"] .pl-add')]
    assert page == [f"+<b>{unique}</b>"]  # the agent's text as text, never as markup
    assert not browser.find_all("#change b")
