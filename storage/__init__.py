"""herald.storage."""
