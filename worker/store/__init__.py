"""The worker's Redis state for jobs: `WorkerJobStore` (claim, heartbeat, fenced writes, promote, recover, re-send,
archive) on top of the contract's `claudeq.jobs.JobStore`, and the constants of the Lua scripts it runs
(`worker_job_scripts`; the scripts themselves are `.lua` files under claudeq/lua/), and concurrency keys' holds and
lines (`concurrency_keys`).

Imports from the worker: nothing.
"""
