"""Files the stages write, written so that no kill at any instant leaves half a file or loses the old one.

Every write goes to a temporary sibling first and is renamed over the target (`os.replace`, atomic on
one file system); a directory is built beside its target and swapped in, the old one kept until the
swap succeeded. Readers see the old content or the new, never a mix.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from udr.errors import UdrError, first_line, quoted, shorten


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hashes(folder: Path, relative_to: Path | None = None) -> list[str]:
    """ "path:sha256" of every file under `folder`, in path order, each path relative to `relative_to` (default
    `folder`): what a fingerprint of a folder's files hashes."""
    root = Path(relative_to) if relative_to is not None else Path(folder)
    return [
        f"{p.relative_to(root).as_posix()}:{file_sha256(p)}" for p in sorted(Path(folder).rglob("*")) if p.is_file()
    ]


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}")


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    """Call `write(tmp)` on a temporary sibling of `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


NAME_MAX = 255  # bytes of one name: ext4, xfs, btrfs, tmpfs
PATH_MAX = 4096


def resolve_target(path: Path, what: str) -> Path:
    """The one rule for every path a user names as an output (`--out`, `--output`, `--dir`, an export, a
    log folder derived from one): resolve it first (`..` and symbolic links, against the current
    directory), then check it, before any work. Returns the resolved path, the one to write (beside,
    then renamed). A one-line UdrError where it names no file or folder (`/`), a name is longer than
    the file system allows, or its nearest existing parent is a file or cannot be written (tried, not
    guessed from permission bits: root ignores them, /proc and read-only mounts do not)."""
    raw = Path(path)
    shown = f"{what} {shorten(raw, 120)}"
    for name in raw.parts:
        if len(os.fsencode(name)) > NAME_MAX:
            raise UdrError(f"{shown}: the name {shorten(name, 40)!r} is longer than the file system allows")
    try:
        resolved = raw.expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a link loop
        raise UdrError(f"cannot write {shown}: {first_line(exc)}") from None
    if len(os.fsencode(str(resolved))) >= PATH_MAX:
        raise UdrError(f"{shown}: the path is longer than the file system allows")
    if resolved.parent == resolved:
        raise UdrError(f"cannot write {shown}: it is the root of the file system")
    parent = resolved.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UdrError(f"cannot write {shown}: {shorten(parent, 120)} is a file, not a directory")
    _probe_writable(parent, f"cannot write {shown}")
    return resolved


def _probe_writable(folder: Path, prefix: str) -> None:
    """A one-line UdrError "<prefix>: <folder> is not writable" unless a file can be made in `folder`."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".udr-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UdrError(f"{prefix}: {shorten(folder, 120)} is not writable ({first_line(exc)})") from None


def check_output_path(path: Path, what: str = "--output") -> Path:
    """The resolved file path to write (:func:`resolve_target`); a one-line UdrError, before any work,
    where `path` cannot be written as a file: it is a directory (`..` included), or an existing file
    that cannot be replaced."""
    resolved = resolve_target(path, what)
    if resolved.is_dir():
        raise UdrError(f"{what} {shorten(path, 120)} is a directory: give a file path")
    if resolved.exists() and not os.access(resolved, os.W_OK):
        raise UdrError(f"{what} {shorten(path, 120)}: cannot write there (the file is read-only)")
    return resolved


def read_json_object(path: Path, what: str, fix: str = "") -> dict:
    """The JSON object in `path`; unreadable, nested too deep or not an object, a one-line UdrError
    "unreadable <what> <path>: <why>[; <fix>]"."""
    tail = f"; {fix}" if fix else ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UdrError(f"unreadable {what} {path}: {first_line(exc)}{tail}") from None
    if not isinstance(data, dict):
        raise UdrError(f"unreadable {what} {path}: expected a JSON object{tail}")
    return data


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    write_atomic(path, lambda tmp: tmp.write_text(text))


def json_text(data: Any, *, sort_keys: bool = False) -> str:
    """The project's JSON file format: indented by 2, a final newline."""
    return json.dumps(data, indent=2, sort_keys=sort_keys) + "\n"


def write_json_atomic(path: Path, data: Any, *, sort_keys: bool = False) -> None:
    """Write `data` as indented JSON (see :func:`json_text`) to `path` atomically."""
    write_text_atomic(path, json_text(data, sort_keys=sort_keys))


def write_parquet_atomic(frame, path: Path) -> None:
    """Write a polars frame to `path` atomically."""
    write_atomic(path, frame.write_parquet)


def remove(path: Path) -> None:
    """Delete a file, link or directory tree if it exists."""
    path = Path(path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE). False where the system or
    file system cannot (then nothing was changed)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


def remove_stale_siblings(dest: Path) -> None:
    """Delete the temporary siblings (`.NAME.tmp-PID`, `.NAME.old-PID`, `.NAME.staging-PID`) that killed
    writers of `dest` left behind (a live writer's own sibling, with this process's PID, is kept)."""
    dest = Path(dest)
    if not dest.parent.is_dir():
        return
    for tag in ("tmp", "old", "staging"):
        for stale in dest.parent.glob(f".{dest.name}.{tag}-*"):
            pid = stale.name.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                remove(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def replace_dir(new: Path, dest: Path) -> None:
    """Move the finished directory `new` to `dest`, replacing what is there, so that at every instant
    `dest` holds the old directory or the new one: the two are exchanged in one atomic step where the
    system can (Linux). Elsewhere the old `dest` is renamed aside first and deleted only after `new`
    is in place (restored if that rename fails)."""
    if dest.is_dir() and not dest.is_symlink() and _exchange(new, dest):
        remove(new)  # now the old directory
        return
    old = None
    if dest.exists() or dest.is_symlink():
        old = _sibling(dest, "old")
        remove(old)
        os.replace(dest, old)
    try:
        os.replace(new, dest)
    except BaseException:
        if old is not None:
            os.replace(old, dest)
        raise
    if old is not None:
        remove(old)


def check_dir_target(dest: Path, markers: Sequence[str], made: str, option: str = "") -> Path:
    """The one guard of every command that replaces a folder: the resolved folder to write
    (:func:`resolve_target`), or a one-line UdrError, before any work, unless `dest` is new, empty, or a
    folder such a command made (it holds one of the files `markers`; `made` says what that is, e.g. "a
    udr bi-encoder"). A file, the current directory or a folder above it (`..` included), and a folder
    of other files are refused and stay untouched. `option`: the option that named `dest`."""
    shown = f"{option} {shorten(dest, 120)}" if option else shorten(dest, 120)
    resolved = resolve_target(dest, option or "target")
    if not resolved.exists():
        return resolved
    here = Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise UdrError(f"cannot write {shown}: it holds the current directory; nothing was written")
    if not resolved.is_dir():
        raise UdrError(f"{shown} is a file: give a directory")
    if any((resolved / marker).is_file() for marker in markers) or not any(resolved.iterdir()):
        _probe_writable(resolved, f"cannot replace {shown}")  # the old folder is emptied after the swap
        return resolved
    raise UdrError(
        f"{shown} holds other files and is not {made} (no {markers[0]}): "
        "give a new or empty directory; nothing was written"
    )


def check_no_links_out(folder: Path, what: str = "model folder") -> None:
    """A one-line UdrError where `folder` holds a symbolic link that leads out of it (or nowhere): a
    model folder reads and writes only inside itself. Links between its own files are fine."""
    folder = Path(folder)
    root = folder.resolve()
    if root.parent.name == "snapshots" and (root.parent.parent / "blobs").is_dir():
        root = root.parent.parent  # a Hugging Face hub snapshot: its files are links into its repo's blobs/
    for dirpath, dirnames, filenames in os.walk(folder):  # links to folders are listed, not followed
        for name in (*dirnames, *filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root) or not target.exists():
                    raise UdrError(
                        f"{shorten(path, 120)} is a link out of the {what} {shorten(folder, 120)} (to "
                        f"{shorten(target, 120)}): a {what} may only hold its own files; copy them in instead"
                    )


def inside(folder: Path, relative: object, what: str) -> Path:
    """`folder / relative` where `relative` is a plain relative path that stays inside `folder` (no
    absolute path, no `..` out of it); a one-line UdrError naming `what` otherwise."""
    if not isinstance(relative, str) or not relative.strip():
        raise UdrError(f"{what}: expected a folder name inside {folder}, got {quoted(relative)}")
    path = Path(folder) / relative
    if Path(relative).is_absolute() or not path.resolve().is_relative_to(Path(folder).resolve()):
        raise UdrError(f"{what} {shorten(relative)!r} leads out of {folder}: only folders inside it are read")
    return path


@contextlib.contextmanager
def staging_dir(dest: Path, tag: str = "staging") -> Iterator[Path]:
    """An empty scratch directory beside `dest` (`.NAME.<tag>-PID`), deleted when the block ends; one a
    killed writer left behind goes with the next :func:`building_dir` of `dest`."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(dest, tag)
    remove(tmp)
    tmp.mkdir()
    try:
        yield tmp
    finally:
        remove(tmp)


@contextlib.contextmanager
def building_dir(dest: Path, markers: Sequence[str] = (), made: str = "") -> Iterator[Path]:
    """An empty temporary directory beside `dest` to fill; it replaces `dest` (:func:`replace_dir`) when
    the block ends without an error, and is deleted otherwise, leaving `dest` as it was. With `markers`,
    `dest` must pass :func:`check_dir_target` first (and again just before the swap)."""
    dest = check_dir_target(dest, markers, made) if markers else Path(dest)
    remove_stale_siblings(dest)
    with staging_dir(dest, "tmp") as tmp:
        yield tmp
        if markers:
            check_dir_target(dest, markers, made)
        readable_as_umask(tmp)
        replace_dir(tmp, dest)


def readable_as_umask(folder: Path) -> None:
    """Give every file under `folder` at least the permissions the umask grants a new file (safetensors
    writes weights 0600: other users of a shared model folder could not read them)."""
    mask = os.umask(0)
    os.umask(mask)
    wanted = 0o666 & ~mask
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if not os.path.islink(path) and (mode & wanted) != wanted:
                os.chmod(path, (mode & 0o7777) | wanted)


def shown_path(path: Path, base: Path) -> str:
    """`path` relative to `base` (e.g. the project) where it lies inside it, else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path(base).resolve()))
    except ValueError:
        return str(path)
