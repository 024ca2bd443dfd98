"""Evidence: a campaign's archive, packed (``archive``, ``assemble``), its names and member checks
(``format``), verified by re-deriving the metrics and tables from the archived journal
(``verify``, ``rederive``, ``tables``), and replayed as a new campaign (``replay``).

May import the report, the orchestration layer (journal, protocol, validation) and what sits
below it; never the service layer, the CLI or ``lab.compare`` (compare reads archives).
"""
