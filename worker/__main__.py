"""`python -m claudeq.worker` is `claudeq-worker`."""

import sys

from .main import main

sys.exit(main())
