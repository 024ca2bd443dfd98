"""The evidence archive's signature: its names and where the trusted keys are looked for, one
place each (lab.evidence.signature signs and checks; issue 34 part 1).

An archive is signed with OpenSSH's own file signatures (``ssh-keygen -Y sign``), a tool every
host reached over SSH has, with a key the user already holds. Stdlib only, no imports of the lab.
"""

from __future__ import annotations

import os
from pathlib import Path

SIGNATURE_NAMESPACE = "evidence-archive@iteralab"
"""``ssh-keygen -Y sign -n``: the namespace every archive signature is made and checked in. A
signature binds its namespace, so a signature the same key made for anything else (``file``,
``email``, git's ``git``) is never taken for an archive's, nor an archive's for theirs. The form
``name@domain`` is the one ssh-keygen(1) recommends for a tool's own namespace."""

SIGNATURE_SUFFIX = ".sig"
"""The detached signature's file is the archive's path with this appended
(``NAME-v1-....tar.gz.sig``): the name ``ssh-keygen -Y sign -f KEY FILE`` itself gives, so the
pair checks with ssh-keygen alone, and any tool that lists ``*.tar.gz`` sees the archive only."""

SSH_KEYGEN = "ssh-keygen"
"""The program that signs and checks (OpenSSH's; ``-Y find-principals`` and ``-Y check-novalidate``
are needed; tested with OpenSSH 9.2)."""

SSH_KEYGEN_PACKAGE = "openssh-client"
"""The Debian and Ubuntu package that installs ``SSH_KEYGEN`` (named in the error when it is missing)."""

ALLOWED_SIGNERS_FILE = "allowed_signers"
"""The file name of the user's list of trusted keys in ``allowed_signers_dir()``; its format is
ssh-keygen(1)'s ALLOWED SIGNERS: one ``NAME KEY-TYPE BASE64-KEY`` line per key, NAME being what
verify reports as the signer."""


def default_allowed_signers() -> Path:
    """Where the allowed-signers file is read when ``--allowed-signers`` is not given:
    ``$XDG_CONFIG_HOME/iteralab/allowed_signers`` (``~/.config/iteralab/allowed_signers`` when
    XDG_CONFIG_HOME is unset or empty), read at call time. A file of the lab's own, not
    ``~/.ssh/allowed_signers``: the keys trusted to sign evidence are chosen for that alone."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "iteralab" / ALLOWED_SIGNERS_FILE


def signature_path(archive: str | Path) -> Path:
    """The detached signature file of ``archive``: its path with SIGNATURE_SUFFIX appended."""
    archive = Path(archive)
    return archive.with_name(archive.name + SIGNATURE_SUFFIX)
