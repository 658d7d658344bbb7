"""claudeq configuration: Settings, the account pool, the worker policy and the Celery configuration."""

from claudeq.errors import ConfigError

from .account_pool import AccountConfig, AccountPool
from .settings import TOOL_PROFILES, Settings, WorkerPolicy, load_settings

__all__ = [
    "TOOL_PROFILES",
    "AccountConfig",
    "AccountPool",
    "ConfigError",
    "Settings",
    "WorkerPolicy",
    "load_settings",
]
