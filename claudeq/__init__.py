"""claudeq: a job-queue worker fleet that runs Claude agent jobs in the background.

One import namespace over the repository's rooms (each a folder of its own, linked here):

- `claudeq` itself holds the contract both sides share: the job and account models (`claudeq.models`), Redis key
  shapes (`claudeq.keys`), the error tree (`claudeq.errors`), the job and account stores with the scripts both
  sides call, transcripts and conversations, and the permission policy.
- `claudeq.config`: settings, the account pool's configuration, Celery configuration.
- `claudeq.producer`: what a producer imports (`Client`, `AsyncClient`, validation) and its front ends (the CLI).
- `claudeq.worker`: what runs in the fleet (Celery app, engine, runner, loops, accounts, metrics, exporter).
- `claudeq.simulator`: a Messages-API model service the real CLI runs against.

See docs/architecture.md.
"""

__version__ = "0.1.0"
