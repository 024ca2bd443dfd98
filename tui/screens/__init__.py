"""The seven screens of the UI, one per file (number keys 1-7)."""
