"""herald.plugins."""
