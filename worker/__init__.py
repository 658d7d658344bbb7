"""claudeq worker: what runs in the fleet. Start it with `claudeq-worker` (`main`); `celery -A claudeq.worker.app`
names the Celery app and the `claudeq.run` task (`app`).

Packages, each importing only those before it (its `__init__` names them; tests/unit/test_import_rule.py checks):

    store        the worker's Redis state for jobs (WorkerJobStore)
    passthrough  the model-service pass-through and the rate-limit headers
    run          one attempt through claude-agent-sdk, and its port (run.outcome)
    metrics      Prometheus: the worker's metrics, label rules, the cluster exporter
    accounts     which account runs a job: slots, admission, signals
    delivery     the engine, the delivery state machine, fenced writes, the loops

Modules of the root: `redaction` and `loop_host` (imported by any package, importing nothing of the worker),
`broker_transport` (kombu's transport, imported by `app`), and the entry points `app`, `main` and `__main__`.
"""
