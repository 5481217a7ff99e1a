"""Opening a path inside a task's sandbox so that nothing the task does can lead the open out.

The task owns its sandbox and can change it while the agent reads: a check on the path followed
by an open ("is it inside? then open it") loses the race to a task that swaps a directory for a
symlink to / in between. So the path is resolved and opened in one step, by the kernel, beneath a
descriptor of the sandbox: openat2(2) with RESOLVE_BENEATH (Linux 5.6+), which follows symlinks
only while they stay beneath and refuses `..` or an absolute link that would leave. Where openat2
is missing, each component is opened with O_NOFOLLOW from the previous one's descriptor, which
refuses every symlink (stricter, and as safe). Final files open O_NONBLOCK, so a FIFO the task
names `stdout` cannot hang a reader. Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

__all__ = ["SandboxPathError", "open_beneath", "split_relative"]

# From linux/openat2.h: resolve flags, and the syscall number (the same on every architecture
# that uses the generic syscall table, x86_64 included).
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437


class SandboxPathError(ValueError):
    """A path that is not allowed or leads out of the sandbox; the message says which."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_have_openat2: bool | None = None  # unknown until the first call


def split_relative(relative: str) -> list[str]:
    """The components of a sandbox-relative path; SandboxPathError for one that may not be used."""
    if "\0" in relative:
        raise SandboxPathError("the path contains a NUL byte")
    if relative.startswith("/"):
        raise SandboxPathError(f"path {relative!r} must be relative to the task's sandbox")
    parts = [p for p in relative.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise SandboxPathError(f"path {relative!r} leaves the task's sandbox: '..' is not allowed")
    return parts


# openat2 answers EAGAIN when a rename during the lookup keeps it from proving the path stays
# beneath (a task renaming directories meanwhile): it may be retried.
_EAGAIN_TRIES = 20


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags=flags, mode=0, resolve=_RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    for _ in range(_EAGAIN_TRIES):
        fd = _libc.syscall(
            _SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how)
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise SandboxPathError(f"{path!r} kept changing while it was opened; try again")


def _walk_nofollow(dir_fd: int, parts: list[str], flags: int) -> int:
    fd = os.dup(dir_fd)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            step = flags if last else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
            try:
                nxt = os.open(part, step | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ENOTDIR, errno.ELOOP) and _is_symlink(part, fd):
                    raise SandboxPathError(
                        f"{part!r} is a symlink; without openat2 (Linux 5.6+) none is followed"
                    ) from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def open_beneath(sandbox: str | os.PathLike, relative: str, directory: bool = False) -> int:
    """A descriptor of `relative` inside `sandbox`, opened for reading; the caller closes it.

    SandboxPathError: the path is not allowed, leads out, or is not a regular file (or, with
    `directory`, not a directory). FileNotFoundError: nothing is there. OSError: other failures.
    """
    global _have_openat2
    parts = split_relative(relative)
    flags = os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else os.O_NONBLOCK)
    root = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not parts:
            fd = os.dup(root)
        elif _have_openat2 is not False:
            try:
                fd = _openat2(root, "/".join(parts), flags)
                _have_openat2 = True
            except OSError as e:
                if e.errno != errno.ENOSYS:
                    raise _explain(e, relative) from None
                _have_openat2 = False
                fd = _walk(root, parts, flags, relative)
        else:
            fd = _walk(root, parts, flags, relative)
    finally:
        os.close(root)
    try:
        mode = os.fstat(fd).st_mode
        wanted = stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)
        if not wanted:
            kind = "a directory" if directory else "a regular file"
            raise SandboxPathError(f"{relative!r} is not {kind} in the task's sandbox")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _walk(root: int, parts: list[str], flags: int, relative: str) -> int:
    try:
        return _walk_nofollow(root, parts, flags)
    except OSError as e:
        raise _explain(e, relative) from None


def _explain(e: OSError, relative: str) -> Exception:
    if e.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, f"{relative!r} does not exist in the sandbox")
    if e.errno in (errno.EXDEV, errno.ELOOP, errno.EAGAIN):
        # EXDEV: openat2 refused a step out; ELOOP: a symlink where none may be followed.
        return SandboxPathError(f"path {relative!r} leads outside the task's sandbox")
    if e.errno == errno.ENOTDIR:
        return SandboxPathError(f"{relative!r}: a part of the path is not a directory")
    return e
