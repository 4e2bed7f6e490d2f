"""One lock for every named thing a process writes: a workspace, a named training run and its log folder, a
saved evaluation, a model or export folder, a pool embedding cache entry.

The lock of `target` is the file `.NAME.lock` beside it, held with `flock` for as long as the writer works,
the holder's pid written in it. It is taken before the writer's first "already exists" check, so two
processes never both pass it: the second is refused in one line naming the holder's pid. The kernel drops
a lock whose holder died (killed, crashed), so the file a dead holder left is simply taken over. The
holder deletes the file when it is done, and the folders it made for it where they stayed empty. A process
may take a lock it already holds (nested steps).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from udr.errors import UdrError, first_line, shorten

# The lock files this process holds, with how many blocks hold each (keyed with the pid: a forked child
# holds none of its parent's).
_held: dict[tuple[int, Path], int] = {}


def lock_file(target: Path) -> Path:
    """The lock file of `target` (resolved, so that every spelling of one path is one lock)."""
    target = Path(target).resolve()
    return target.with_name(f".{target.name}.lock")


@contextlib.contextmanager
def holding(target: Path, what: str) -> Iterator[None]:
    """Hold the lock of `target` (`what` names it in the error: "workspace", "export folder"...) for the
    block; a one-line UdrError naming the holder's pid where another live process holds it."""
    lock = lock_file(target)
    key = (os.getpid(), lock)
    if _held.get(key):
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    made = [p for p in (lock.parent, *lock.parent.parents) if not p.exists()]  # folders the lock makes
    try:
        fd = _acquire(lock, f"{what} {shorten(target, 120)}")
    except BaseException:
        _remove_empty(made)
        raise
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)  # before the unlock: a process that opened it meanwhile sees another file and retries
        os.close(fd)
        _remove_empty(made)


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders a lock made (innermost first) where nothing else was written in them."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _acquire(lock: Path, shown: str) -> int:
    """The open, locked descriptor of `lock`, the holder's pid written in it."""
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue  # its folder, made by another process's lock, was removed as we made ours
        except OSError as exc:
            raise UdrError(f"cannot lock {shown}: {first_line(exc)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise UdrError(
                    f"{shown} is being written by another process (pid {holder}): wait for it to end, or stop it"
                ) from None
            raise UdrError(f"cannot lock {shown}: {first_line(exc)}") from None
        try:  # the last holder may have deleted the file between our open and our lock
            current = os.stat(lock)
            mine = os.fstat(fd)
            if (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _holder(fd: int) -> str:
    """The pid written in a lock file ("unknown" while its holder has not written it yet)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return text if text.isdigit() else "unknown"
