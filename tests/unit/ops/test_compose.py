"""docker-compose.yml: valid, and names only images, paths, commands and ports that exist in the repo.

`docker compose config` validates it where the compose client exists; the structural checks run everywhere.
"""

from __future__ import annotations

import re
import shutil
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


def _compose_client() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _compose_client(), reason="no docker compose client here: the structural tests below apply")
def test_docker_compose_config_validates() -> None:
    result = subprocess.run(
        ["docker", "compose", "--profile", "sim", "config", "--quiet"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


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
