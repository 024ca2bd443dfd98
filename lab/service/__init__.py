"""Service layer: what the CLI and the terminal UI call (a campaign's start, stop, archive and
replay in ``campaigns``; the screens' computed views in ``views``).

May import every engine layer below it; never ``lab.cli``, ``tui`` or textual.
"""
