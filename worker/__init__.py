"""claudeq worker."""
