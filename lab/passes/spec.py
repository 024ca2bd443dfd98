"""What one pass is told to do (written by the host as ``pass.json`` in the pass folder)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.constants import DEFAULT_SEED


@dataclass(frozen=True)
class PassSpec:
    """One pass. Paths are as seen by the pass process (inside a container: mount points).

    ``warmup_items``: first N corpus items; ``warmup_passes``: forward passes over them.
    ``threads``: torch CPU threads (0 = torch default).
    """

    campaign: str
    pass_id: str
    variant: dict
    corpus_path: str
    model_ref: str
    out_dir: str
    warmup_items: int = 16
    warmup_passes: int = 1
    seed: int = DEFAULT_SEED
    threads: int = 0
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> "PassSpec":
        return cls(**json.loads(Path(path).read_text()))
