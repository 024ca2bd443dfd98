"""Error types shared by modules that sit below ``lab.protocol`` (no imports of their own).

``ProtocolError`` is raised for a campaign file that cannot be used as written; it lives
here so that low-level checks (e.g. ``lab.host_cards``) can raise it without importing
``lab.protocol``, which calls them at lock. ``lab.protocol`` re-exports it.
"""

from __future__ import annotations


class ProtocolError(ValueError):
    """A campaign file that cannot be used as written; one line naming the field and the fix."""
