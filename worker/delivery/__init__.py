"""What happens to a claimed job: the engine that hosts every delivery of a process on one loop (`engine`), the
delivery state machine (`handler`) and one delivery's state (`state`), fenced writes and events (`fenced`), the lease
heartbeat (`lease`), slot release, promotion and sends (`dispatch`), transient retries (`retry`, `waits`), the
failure policy (`failure`), a conversation's sessions (`session_planner`), the background loops (`loops`), end
notifications (`notifier`), the ports the engine is given (`ports`), coding jobs' worktrees around each attempt
(`workspaces`) and concurrency keys (`key_gate`).

Imports from the worker: redaction, loop_host, store, accounts, run, metrics, workspace.
"""
