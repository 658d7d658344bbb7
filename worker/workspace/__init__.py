"""Coding jobs' git worktrees: made for an attempt before its run, committed and diffed after it, removed when the
job ends (`worktree`). What a spec asks and a record keeps is `claudeq.workspaces`; git itself, `claudeq.git_repo`.

Imports from the worker: nothing.
"""
