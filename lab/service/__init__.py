"""Service layer: what the CLI and the terminal UI call (a campaign's start, stop, archive and
replay in ``campaigns``; the screens' computed views and the report's rebuild in ``views``; the
live journal feed, ETA line and status words in ``live``). The UI imports lab only through
this layer, the pass records and the facts (import contract in pyproject.toml).

May import every engine layer below it; never ``lab.cli``, ``tui`` or textual.
"""
