"""What every worker runs beside its deliveries, on the engine's loop: the background loops (`loops`: promoter,
reconciler, heartbeat, archiver, scheduler, cancel listener) and the end notifications of finished jobs (`notifier`,
with `webhook_target` vetting where a webhook may go). Each is safe with any number of workers running it, and sets a
failing item aside rather than stopping (docs/architecture.md#background-loops).

Imports from the worker: loop_host, store, delivery.
"""
