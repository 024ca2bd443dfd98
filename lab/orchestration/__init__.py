"""Orchestration: a campaign from its file to its journal: the typed campaign file (``config``),
the locked protocol (``protocol``, ``preflight``, ``identity``), the plan (``schedule``), the
orchestrator that runs the plan's passes through a launcher, the journal (the only state),
the campaign's status, the validation of predictions, and ``doctor``.

May import the launchers, the passes, memory, the inputs and the facts; never the report,
compare, evidence, the service layer or the CLI.
"""
