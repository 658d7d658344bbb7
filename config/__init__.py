"""claudeq configuration: Settings, the account pool, the worker policy and the Celery configuration."""

from claudeq.config.account_pool import AccountConfig, AccountPool
from claudeq.config.settings import TOOL_PROFILES, Settings, WorkerPolicy, load_settings
from claudeq.errors import ConfigError

__all__ = [
    "TOOL_PROFILES",
    "AccountConfig",
    "AccountPool",
    "ConfigError",
    "Settings",
    "WorkerPolicy",
    "load_settings",
]
