"""herald.cluster."""
