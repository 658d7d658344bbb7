"""`python -m claudeq.worker` is `claudeq-worker`."""

import sys

from claudeq.worker.main import main

sys.exit(main())
