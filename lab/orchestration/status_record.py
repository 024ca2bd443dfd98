"""A campaign folder's status as a typed record (issue 33, part 3).

``lab.orchestration.status.campaign_status`` returns a dict (the CLI and the headless progress
line read it as it is); a reader that wants attributes decodes it once with
``CampaignStatus.of`` (the service layer's journal feed does, for the UI).
"""

from __future__ import annotations

import msgspec

from lab.orchestration.status import CampaignState
from lab.passes.records import Attempt

__all__ = ["CampaignStatus", "OrchestratorInfo"]


class OrchestratorInfo(msgspec.Struct, frozen=True):
    """The journal's ``orchestrator`` control as the status shows it (written by
    lab.orchestration.orchestrator): ``pid`` the orchestrator's process id, None once it ended or
    before one ever ran. The other fields it holds (process_create_time, ended...) are not read
    here."""

    pid: int | None = None


class CampaignStatus(msgspec.Struct, frozen=True):
    """campaign_status's dict, typed: ``dir`` the campaign folder (text); ``state`` running,
    paused, stopped, finished, interrupted (the journal says running but its orchestrator is
    gone), blocked or not started; ``planned`` / ``finished`` schedule slots in the plan / filled by a
    finished attempt; ``attempts`` the journal's typed attempts in schedule order; ``orchestrator``
    its control record; ``alive`` True while that orchestrator process runs."""

    dir: str
    state: CampaignState
    planned: int
    finished: int
    attempts: tuple[Attempt, ...]
    orchestrator: OrchestratorInfo
    alive: bool

    @classmethod
    def of(cls, status: dict) -> CampaignStatus:
        """The record of ``campaign_status(...)``'s dict (its attempts kept as they are).
        Raises msgspec.ValidationError for a dict of another shape."""
        return msgspec.convert(status, cls)
