"""`python -m worker` is `claudeq-worker`."""

import sys

from worker.main import main

sys.exit(main())
