"""docker-compose.yml and ops/Dockerfile: valid, and naming only images, paths, settings, commands and ports that
exist in the repo. Every check here runs everywhere (pyyaml and the repo itself); the checks that need a container
engine (`docker compose config`, an image build) are the optional `make compose-check`, never part of `make test`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from claudeq.config.account_pool import AccountPool
from claudeq.simulator.config import load_config

ROOT = Path(__file__).resolve().parents[3]
_VAR = re.compile(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}")


def interpolate(value: str) -> str:
    """Compose's `${VAR:-default}` with nothing set: the default ($$ stays a literal $)."""
    return _VAR.sub(lambda m: m.group(2) or "", value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


#: Keys the compose specification allows at the top level and in a service (those this project may use).
TOP_LEVEL_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
SERVICE_KEYS = {
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "env_file",
    "volumes",
    "ports",
    "expose",
    "depends_on",
    "healthcheck",
    "restart",
    "init",
    "profiles",
    "stop_grace_period",
    "stop_signal",
    "user",
    "working_dir",
    "labels",
    "logging",
    "networks",
    "secrets",
    "configs",
    "deploy",
    "ulimits",
    "tmpfs",
}
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"}
RESTART_POLICIES = {"no", "always", "on-failure", "unless-stopped"}
_DURATION = re.compile(r"(\d+(ms|s|m|h))+")


def _settings_env_names() -> set[str]:
    from claudeq.config.settings import Settings

    return {f"CLAUDEQ_{name.upper()}" for name in Settings.model_fields}


def _is_setting(name: str) -> bool:
    """Whether CLAUDEQ_<name> is a setting (nested ones as CLAUDEQ_POLICY__ALLOWED_TOOLS)."""
    from claudeq.config.settings import Settings, WorkerPolicy

    head, _, nested = name.partition("__")
    if head not in _settings_env_names():
        return False
    if not nested:
        return True
    field = Settings.model_fields[head.removeprefix("CLAUDEQ_").lower()]
    return field.annotation is WorkerPolicy and nested.lower() in WorkerPolicy.model_fields


def test_compose_file_uses_only_keys_the_compose_specification_knows(compose: dict[str, Any]) -> None:
    assert {k for k in compose if not k.startswith("x-")} <= TOP_LEVEL_KEYS
    for name, service in compose["services"].items():
        assert set(service) <= SERVICE_KEYS, f"{name}: {set(service) - SERVICE_KEYS}"
        assert service.get("restart", "no") in RESTART_POLICIES, name
        health = service.get("healthcheck")
        if health:
            assert set(health) <= HEALTHCHECK_KEYS, name
            assert health["test"][0] in ("CMD", "CMD-SHELL", "NONE"), name
            for key in ("interval", "timeout", "start_period"):
                assert key not in health or _DURATION.fullmatch(health[key]), f"{name}: {key}"
        if "stop_grace_period" in service:
            assert _DURATION.fullmatch(service["stop_grace_period"]), name
        for value in [*service.get("command", []), *service.get("environment", {}).values()]:
            assert isinstance(value, str), f"{name}: compose wants strings, got {value!r}"


def test_every_reference_between_services_and_volumes_resolves(compose: dict[str, Any]) -> None:
    services: dict[str, Any] = compose["services"]
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        depends = service.get("depends_on", {})
        for other in depends:
            assert other in services, f"{name} depends on unknown {other}"
            if isinstance(depends, dict) and depends[other].get("condition") == "service_healthy":
                assert "healthcheck" in services[other], f"{name} waits for {other}, which has no healthcheck"
        for volume in service.get("volumes", []):
            source = interpolate(volume).split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name}: named volume {source} is not declared"
        for port in service.get("ports", []):
            assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", port), f"{name}: {port} (publish on loopback only)"


def test_every_interpolation_has_a_default_and_shell_dollars_are_escaped() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    code = "\n".join(line.split(" #", 1)[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
    for match in re.finditer(r"\$\{([^}]*)\}", code.replace("$$", "")):
        assert re.fullmatch(r"[A-Z0-9_]+:-[^}]*", match.group(1)), f"${{{match.group(1)}}} has no default"
    bare = re.findall(r"\$(?!\{)\S*", code.replace("$$", ""))
    assert not bare, f"compose would interpolate these (write $$ for the shell): {bare}"
    documented = (ROOT / "ops/compose.env.example").read_text()
    for name in set(_VAR.findall(code)):
        assert name[0] in documented, f"{name[0]} is not documented in ops/compose.env.example"


def test_every_claudeq_variable_it_sets_is_a_setting(services: dict[str, dict[str, Any]]) -> None:
    names = {key for service in services.values() for key in service.get("environment", {})}
    dockerfile_env = re.findall(r"\b(CLAUDEQ_[A-Z0-9_]+)=", (ROOT / "ops/Dockerfile").read_text())
    example = re.findall(r"^#?\s*(CLAUDEQ_[A-Z0-9_]+)=", (ROOT / "ops/compose.env.example").read_text(), re.M)
    interpolated = {"CLAUDEQ_HOST_ACCOUNTS_FILE"}  # read by compose itself, not by claudeq
    for name in {n for n in [*names, *dockerfile_env, *example] if n.startswith("CLAUDEQ_")} - interpolated:
        assert _is_setting(name), f"{name} is not a claudeq setting"


def _dockerfile() -> list[tuple[str, str]]:
    """ops/Dockerfile as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", (ROOT / "ops/Dockerfile").read_text())
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_copies_every_package_room_and_nothing_missing(services: dict[str, dict[str, Any]]) -> None:
    steps = _dockerfile()
    known = {"FROM", "RUN", "ENV", "WORKDIR", "COPY", "USER", "EXPOSE", "CMD", "ARG", "LABEL", "ENTRYPOINT"}
    assert {word for word, _ in steps} <= known
    base = next(args for word, args in steps if word == "FROM")
    assert ":" in base and not base.endswith(":latest"), base
    copied: set[str] = set()
    for word, args in steps:
        if word == "COPY":
            *sources, _dest = args.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the build context"
                copied.add(source.strip("./"))
    # The package root and every room it links (claudeq/worker -> ../worker ...) must be in the image.
    rooms = {p.name for p in (ROOT / "claudeq").iterdir() if p.is_symlink()}
    assert {"claudeq", "pyproject.toml", *rooms} <= copied, copied
    ignore = [line for line in (ROOT / "ops/Dockerfile.dockerignore").read_text().splitlines() if line.startswith("!")]
    for source in copied:
        assert any(line.lstrip("!").split("/")[0] == source for line in ignore), (
            f"{source} is excluded by .dockerignore"
        )
    user = [args for word, args in steps if word == "USER"]
    assert user and user[-1] not in ("root", "0"), "agents must not run as root"
    cmd = json.loads(next(args for word, args in reversed(steps) if word == "CMD"))
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    assert cmd[0] in scripts
    exposed = {port for word, args in steps if word == "EXPOSE" for port in args.split()}
    for name in ("worker", "exporter"):
        assert set(services[name]["expose"]) <= exposed, name


def test_has_the_fleet_services_and_a_sim_profile(services: dict[str, dict[str, Any]]) -> None:
    assert {"redis", "worker", "exporter", "prometheus", "grafana", "flower"} <= set(services)
    assert services["simulator"]["profiles"] == ["sim"]
    for name in ("redis", "worker", "exporter", "prometheus", "grafana", "flower"):
        assert "profiles" not in services[name], name


def test_redis_never_evicts_and_keeps_an_append_only_file(services: dict[str, dict[str, Any]]) -> None:
    command = " ".join(services["redis"]["command"])
    assert "--maxmemory-policy noeviction" in command
    assert "--appendonly yes" in command
    assert services["redis"]["healthcheck"]["test"]


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", value)
    assert match, value
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_worker_scales_checks_health_and_outlives_its_grace(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert worker["healthcheck"]["test"] == ["CMD", "claudeq-worker", "--check"]
    # --scale worker=N needs: no fixed container name and no published host port
    assert "container_name" not in worker and "ports" not in worker
    grace = float(worker["environment"]["CLAUDEQ_SHUTDOWN_GRACE_S"])
    assert _seconds(worker["stop_grace_period"]) > grace
    assert worker["environment"]["CLAUDEQ_METRICS_PORT"] != "0"


def test_prometheus_scrapes_every_worker_replica_and_the_exporter(services: dict[str, dict[str, Any]]) -> None:
    config = yaml.safe_load((ROOT / "ops/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    dns = jobs["claudeq-worker"]["dns_sd_configs"][0]
    assert dns["names"] == ["worker"] and dns["type"] == "A"
    assert str(dns["port"]) == services["worker"]["environment"]["CLAUDEQ_METRICS_PORT"]
    exporter_port = services["exporter"]["command"][services["exporter"]["command"].index("--port") + 1]
    assert jobs["claudeq-exporter"]["static_configs"][0]["targets"] == [f"exporter:{exporter_port}"]


def _bind_sources(service: dict[str, Any]) -> list[str]:
    sources = []
    for volume in service.get("volumes", []):
        source = interpolate(volume).split(":")[0]
        if source.startswith((".", "/")):
            sources.append(source)
    return sources


def test_every_path_it_names_exists_in_the_repo(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for source in _bind_sources(service):
            assert (ROOT / source).exists(), f"{name}: {source}"
        build = service.get("build")
        if build:
            assert (ROOT / build["context"]).is_dir(), name
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for env_file in service.get("env_file", []):
            path = ROOT / env_file["path"]
            # an optional env file (holding secrets, never committed) must come with its committed example
            assert path.exists() or (not env_file.get("required", True) and path.with_suffix(".env.example").exists())


def test_images_are_built_here_or_pinned(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        image = service["image"]
        if "build" in service:
            assert image == "claudeq:local", name
        else:
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"


def test_commands_are_console_scripts_of_this_repo(services: dict[str, dict[str, Any]]) -> None:
    scripts = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
    for name, service in services.items():
        if service.get("image") != "claudeq:local":
            continue
        command = service["command"]
        assert command[0] in scripts | {"sh"}, f"{name}: {command[0]}"


def test_exporter_subcommand_is_mounted_in_the_cli() -> None:
    import typer.main

    from claudeq.producer.cli import app

    names = {cmd.name or (cmd.callback.__name__ if cmd.callback else "") for cmd in app.registered_commands}
    groups = {group.name for group in app.registered_groups}
    assert "exporter" in names | groups
    typer.main.get_command(app)  # the whole CLI still builds


def test_simulator_cli_takes_the_flags_compose_passes(services: dict[str, dict[str, Any]]) -> None:
    command = services["simulator"]["command"]
    help_text = subprocess.run(
        [str(Path(sys.executable).parent / "claudeq-sim"), "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    for flag in (arg for arg in command[1:] if arg.startswith("--")):
        assert flag in help_text, flag


def test_sim_accounts_point_at_the_simulator_with_its_tokens(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    accounts_file = next(
        s for s in (interpolate(v) for v in worker["volumes"]) if s.endswith(":/etc/claudeq/accounts.toml:ro")
    )
    pool = AccountPool.from_toml(ROOT / accounts_file.split(":")[0])
    sim = load_config(ROOT / "ops/simulator.sim.toml")
    tokens = {a.name: a.token.get_secret_value() for a in sim.accounts}
    env = worker["environment"]
    port = services["simulator"]["command"][services["simulator"]["command"].index("--port") + 1]
    for account in pool.accounts:
        assert account.base_url == f"http://simulator:{port}"
        assert account.token_env is not None
        assert env[account.token_env] == tokens[account.name]
