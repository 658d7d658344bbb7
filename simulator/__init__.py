"""claudeq simulator."""
