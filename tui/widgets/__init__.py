"""Widgets of the terminal UI: one per file, named after its class."""
