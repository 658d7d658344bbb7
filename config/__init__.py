"""claudeq configuration: Settings, the account pool, the worker policy and the Celery configuration."""

from config.accounts import AccountConfig, AccountPool
from config.errors import ConfigError
from config.settings import TOOL_PROFILES, Settings, WorkerPolicy, load_settings

__all__ = [
    "TOOL_PROFILES",
    "AccountConfig",
    "AccountPool",
    "ConfigError",
    "Settings",
    "WorkerPolicy",
    "load_settings",
]
