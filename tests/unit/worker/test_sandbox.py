"""The sandbox's arguments (what a run sees), and the CLI's environment as an allow-list."""

from __future__ import annotations

from pathlib import Path

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import Settings, WorkerPolicy
from claudeq.models import JobSpec
from claudeq.worker.redaction import redact, remember_settings_secrets
from claudeq.worker.run.cli_env import ENV_KEEP_VAR, SDK_VARS, Credential, RunTags, build_env, sealed
from claudeq.worker.run.relay import host_allowed
from claudeq.worker.run.sandbox import Forward, SandboxView, sandboxed

ACCOUNT = AccountConfig(name="a", kind="oauth", token_env="TOK_A")


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, arg in enumerate(args) if arg == flag]


def test_the_view_binds_the_workspace_run_dir_and_cli_alone(tmp_path: Path) -> None:
    ws, run, cli = tmp_path / "ws", tmp_path / "run", tmp_path / "bin" / "claude"
    for folder in (ws, run, cli.parent):
        folder.mkdir()
    cli.write_text("")
    (tmp_path / "link").symlink_to(ws)
    view = SandboxView(cli=cli, run_dir=run, cwd=tmp_path / "link", forwards=[Forward(4242, tmp_path / "pt.sock")])
    args = view.args()
    assert {"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"} <= set(args)
    assert "--share-net" not in args
    # Read-only workspace (a profile that does not write), at the path the job gave and at its real path.
    assert _pairs(args, "--ro-bind")[-2:] == [(str(ws), str(tmp_path / "link")), (str(ws), str(ws))]
    assert (str(run), str(run)) in _pairs(args, "--bind")
    assert (str(cli), str(cli)) in _pairs(args, "--ro-bind")
    assert (str(tmp_path / "pt.sock"), "/run/claudeq/forward-0.sock") in _pairs(args, "--bind")
    assert args[args.index("--tmpfs") + 1] == "/tmp" and "--proc" in args
    bound = {src for src, _ in _pairs(args, "--bind") + _pairs(args, "--ro-bind")}
    assert not {"/", "/root", "/home", "/proc", str(tmp_path)} & bound
    assert view.forward_spec() == "4242=/run/claudeq/forward-0.sock"
    writable = SandboxView(cli=cli, run_dir=run, cwd=ws, writable=True, share_net=True).args()
    assert (str(ws), str(ws)) in _pairs(writable, "--bind") and "--share-net" in writable


def test_runs_with_built_in_tools_are_sandboxed_unless_the_operator_turns_it_off() -> None:
    policy = WorkerPolicy(allowed_tools=["Read", "Glob", "Grep"])
    assert sandboxed(JobSpec(prompt="x", tools="read-only"), policy)
    assert not sandboxed(JobSpec(prompt="x"), policy)  # no tools: nothing to hold
    assert not sandboxed(JobSpec(prompt="x", tools="read-only"), policy.model_copy(update={"sandbox": "off"}))


def _settings(**overrides: object) -> Settings:
    settings = Settings(_env_file=None, **overrides)  # type: ignore[call-arg]
    settings.__dict__["accounts"] = AccountPool(accounts=[ACCOUNT])
    return settings


def test_the_cli_gets_an_allow_list_of_the_workers_environment(tmp_path: Path) -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/w",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "SSL_CERT_FILE": "/etc/ssl/ca.pem",
        "SOME_TOOL_HOME": "/opt/tool",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-not-named-anywhere",
        "MY_PROXY": "http://proxy:3128",
        "TOK_A": "sk-ant-oat01-test-a",
    }
    env = sealed(
        build_env(
            ACCOUNT,
            _settings(cli_env=["MY_PROXY"]),
            credential=Credential("sk-ant-oat01-standin"),
            tags=RunTags("j"),
            config_dir=tmp_path,
            environ=environ,
        )
    )
    keep = env[ENV_KEEP_VAR].split()
    assert {"PATH", "HOME", "LC_ALL", "TZ", "SSL_CERT_FILE", "MY_PROXY", "CLAUDE_CODE_OAUTH_TOKEN"} <= set(keep)
    assert {"CLAUDEQ_JOB_ID", "CLAUDE_CONFIG_DIR", *SDK_VARS} <= set(keep)
    # Unknown variables never reach the CLI, secret or not (a deny-list would have passed the AWS key on).
    assert not {"SOME_TOOL_HOME", "AWS_SECRET_ACCESS_KEY", "TOK_A"} & set(keep)
    assert env["CLAUDE_CODE_OAUTH_TOKEN"] == "sk-ant-oat01-standin"


def test_every_secret_the_tenants_file_and_the_settings_name_is_redacted(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "alpha"\nwebhook_secret_env = "CQU_WH"\nmcp_token_env = "CQU_MCP"\n')
    values = {
        "CQU_WH": "whsec_unitwebhooksecret01",
        "CQU_MCP": "unit-mcp-token-0192",
        "CLAUDEQ_WEB_TOKEN": "unit-web-token-7731",
        "CLAUDEQ_WEBHOOK_SECRET": "whsec_unitfleetsecret02",
    }
    settings = _settings(tenants_file=tenants, archive_url="postgresql://u:unitarchivepw88@db/x")
    remember_settings_secrets(settings, environ=values)
    text = " ".join([*values.values(), "unitarchivepw88"])
    assert redact(text) == " ".join(["***"] * 5)


def test_network_hosts_match_by_name_port_and_subdomain() -> None:
    allowed = ["pypi.org", "files.example.com:443", "*.githubusercontent.com"]
    assert host_allowed("pypi.org", 443, allowed) and host_allowed("PyPI.org", 80, allowed)
    assert host_allowed("files.example.com", 443, allowed)
    assert not host_allowed("files.example.com", 80, allowed)
    assert host_allowed("raw.githubusercontent.com", 443, allowed)
    assert not host_allowed("githubusercontent.com.evil.org", 443, allowed)
    assert not host_allowed("evilpypi.org", 443, allowed) and not host_allowed("127.0.0.1", 6379, allowed)
