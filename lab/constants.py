"""Defaults used when a campaign file or a command line leaves a value out: one place each.

Stdlib only, imports nothing (the pass runner may read it inside a container).
"""

from __future__ import annotations

DEFAULT_SEED = 0
"""[timing] seed: torch.manual_seed of every pass (recorded in the manifest)."""

CORPUS_SEED = 20260924
"""Sampling seed of `iteralab corpus build` (the demo corpus was drawn with it)."""

DEFAULT_DELIVERABLES = 1
"""[campaign] deliverables: distinct useful corpora the job must produce (seed: count once)."""

DEFAULT_REPETITIONS = 5
"""Passes per variant (SPEC 3.5: default 5, rotated order)."""

DEFAULT_LOTS = 1
"""[cost] lots when the section names a package but not its lot count. There is no default
GPU or package: without [cost] nothing is priced (no price is invented)."""
