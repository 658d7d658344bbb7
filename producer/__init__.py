"""claudeq producer."""
