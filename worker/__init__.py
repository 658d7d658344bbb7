"""claudeq worker: the Celery app and task (`app`), the engine that hosts every run of a process on one asyncio loop
(`engine`), the runner that drives one attempt through claude-agent-sdk (`runner`), the failure policy (`policy`),
transient retries (`retry`), accounts, metrics and the background loops (`loops`). Start it with `claudeq-worker`.
"""
