"""The service's data directory is private to the service's user: the directory 0700 and
every file in it 0600 (``sessions.sqlite3`` holds every participant's words)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


class PrivacyError(PermissionError):
    """The data directory or a file in it cannot be made private; the text names it."""


def _make_private(path: Path, mode: int) -> None:
    try:
        if stat.S_IMODE(path.lstat().st_mode) != mode:
            os.chmod(path, mode)
        actual = stat.S_IMODE(path.lstat().st_mode)
    except OSError as exc:
        raise PrivacyError(
            f"cannot make {path} private ({oct(mode)}) to this user: {exc} (does this user own it?)"
        ) from exc
    if actual != mode:
        raise PrivacyError(f"{path} is {oct(actual)}, not {oct(mode)}, after chmod")


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (0700) when missing, then make it 0700 and every regular file in it
    0600, and check that they are; raises :class:`PrivacyError` when one cannot be made
    private. Symbolic links and subdirectories are left alone."""
    path = Path(path).expanduser()
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise PrivacyError(f"cannot create the data directory {path}: {exc}") from exc
    _make_private(path, DIR_MODE)
    for entry in path.iterdir():
        if entry.is_file() and not entry.is_symlink():
            _make_private(entry, FILE_MODE)
    return path


def private_store_files(path: Path) -> None:
    """Create the database file ``path`` empty with mode 0600 when missing, and make it and
    its WAL and shared-memory files 0600 (SQLite gives a WAL it creates the database's
    mode)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
    except OSError as exc:
        raise PrivacyError(f"cannot create {path}: {exc}") from exc
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            _make_private(file, FILE_MODE)
