"""The C task wrapper (agent/task_wrapper.c): built once, then spawned by the agent for each task
instead of a forked Python wrapper (agent/python_wrapper.py).

A forked Python wrapper costs a task about 2-3 ms of CPU, most of it the copy-on-write faults
of the launcher's heap; the C one is spawned without copying anything. The agent builds it on
first start with musl where it is installed, else the system's C compiler, named by what it is
built from (source, machine, libc, the ways to build), into a directory only root or the
agent's user can change, down to the root of the file system: the agent (usually root) runs
it for every task, so nobody else may be able to replace it. Root agents share
/var/cache/agora; others use their work dir. The binary is run once with no arguments (it must
answer with its usage, exit 2) before it is trusted. Where no compiler is found, or any of
this fails, the launcher forks Python wrappers as before: same protocol, same files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

import structlog

log = structlog.get_logger(__name__)

SOURCE = Path(__file__).with_name("task_wrapper.c")
SHARED_DIR = Path("/var/cache/agora")  # for agents running as root
# Set to "0" to use the Python wrapper (the reference implementation) even where C is built.
ENV_SWITCH = "AGORA_NATIVE_WRAPPER"


def safe_dir(directory: Path) -> Path | None:
    """`directory` resolved, if only root or this user can change it or any directory above it
    (a sticky directory such as /tmp counts as safe above it: others cannot rename what is
    ours); else None. Use the path returned: a symlink on the way is not checked again."""
    me = os.geteuid()
    real = Path(os.path.realpath(directory))
    for i, path in enumerate([real, *real.parents]):
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, me):
            return None
        writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable_by_others and (i == 0 or not st.st_mode & stat.S_ISVTX):
            return None
    return real


def _trusted_file(path: Path) -> bool:
    """A plain file of root's or this user's that no one else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_uid in (0, os.geteuid())
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


# Linked statically where the C library allows it (Debian's libc6-dev ships libc.a): each
# task's exec then maps no shared library, about 0.15 ms less CPU a task (0.38 ms against 0.53
# to spawn and reap it, measured on a 2-core EPYC). Position-independent where the toolchain
# can (-static-pie: the root-run binary keeps its address randomization), else plain -static,
# else dynamically linked.
BUILDS = (("-O2", "-static-pie"), ("-O2", "-static"), ("-O2",))

# Before those, with musl where it is installed (Debian's musl-tools): its start-up is a
# fraction of glibc's, which probes the CPU with dozens of cpuid instructions (each a trap to
# the hypervisor on a virtual machine) and maps a 1 MB image. Spawning and reaping the wrapper
# took 0.14 ms of CPU against 0.43 for glibc's -static-pie (2-core EPYC VM). musl-gcc's spec
# file knows no -static-pie, so that build names musl's start files itself.
MUSL_GCC = "musl-gcc"


def _musl_lib_dir(musl_gcc: str) -> Path | None:
    """musl's library directory, from the spec file its musl-gcc script passes to gcc."""
    try:
        script = Path(musl_gcc).read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r'-specs "?([^"\s]+)"?', script)
    if match is None:
        return None
    directory = Path(match.group(1)).parent
    return directory if (directory / "rcrt1.o").exists() else None


def _gcc_file(name: str) -> str | None:
    """gcc's own start file `name` (crtbeginS.o...), as an absolute path; None if unknown."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    try:
        found = subprocess.run(
            [gcc, f"-print-file-name={name}"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return found if os.path.isabs(found) and os.path.exists(found) else None


Build = tuple[list[str], list[str]]  # the compiler and flags before the source, and after it


def _musl_builds() -> tuple[list[Build], list[Build]]:
    """musl's builds: (position-independent, plain static); empty without musl-gcc."""
    musl_gcc = shutil.which(MUSL_GCC)
    if musl_gcc is None:
        return [], []
    pie: list[Build] = []
    lib = _musl_lib_dir(musl_gcc)
    begin, end = _gcc_file("crtbeginS.o"), _gcc_file("crtendS.o")
    if lib is not None and begin and end:
        # In the canonical order: start files, the source, musl's C library, end files.
        static_pie = "-Wl,-static,-pie,--no-dynamic-linker,-z,text"
        pie.append(
            (
                [musl_gcc, "-O2", "-fPIE", "-nostartfiles", str(lib / "rcrt1.o"),
                 str(lib / "crti.o"), begin],
                [static_pie, "-lc", end, str(lib / "crtn.o")],
            )
        )  # fmt: skip
    return pie, [([musl_gcc, "-O2", "-static"], [])]


def _builds(compiler: str | None) -> list[Build]:
    """Every way to build, best first: position-independent ones first (the binary runs as
    root), musl's before the system compiler's at each step."""
    musl_pie, musl_static = _musl_builds()
    system: list[Build] = [([compiler, *flags], []) for flags in BUILDS] if compiler else []
    pie = [b for b in system if "-static-pie" in b[0]]
    static = [b for b in system if "-static" in b[0]]
    rest = [b for b in system if b not in pie and b not in static]
    return musl_pie + pie + musl_static + static + rest


def _libc_identity() -> str:
    """The C library this process runs on, as a file (size and time): a security update of
    libc changes it, and a statically linked wrapper must then be built again with the new one
    (libc6-dev's libc.a is updated with it)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if "/libc.so" in f"/{path}" or "/libc-" in f"/{path}":
                    st = os.stat(f"/{path}")
                    return f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        pass
    return ""


def _build_id(source: bytes, builds: list[Build]) -> str:
    libc = "-".join(platform.libc_ver())
    # A new way to build, a new name; so is an update of musl (its libc.a is linked in).
    how = ";".join(" ".join(before[1:] + after) for before, after in builds)
    musl = shutil.which(MUSL_GCC)
    lib = _musl_lib_dir(musl) if musl else None
    musl_identity = ""
    if lib is not None:
        with contextlib.suppress(OSError):
            st = os.stat(lib / "libc.a")
            musl_identity = f"{st.st_size}:{st.st_mtime_ns}"
    what = f"|{platform.machine()}|{libc}|{_libc_identity()}|{musl_identity}|{how}"
    return hashlib.sha256(source + what.encode()).hexdigest()[:16]


def _compile(builds: list[Build], output: str) -> None:
    """Builds the wrapper at `output` the first way in `builds` that compiles and answers."""
    failure: Exception | None = None
    for before, after in builds:
        try:
            subprocess.run(
                [*before, "-o", output, str(SOURCE), *after],
                check=True,
                capture_output=True,
                timeout=120,
            )
            os.chmod(output, 0o755)
            if _answers(Path(output)):
                return
            failure = OSError(f"the wrapper built with {' '.join(before[1:])} does not answer")
        except (OSError, subprocess.SubprocessError) as e:
            failure = e
    assert failure is not None
    raise failure


def _answers(binary: Path) -> bool:
    """Runs it with no arguments: a sound build prints its usage and exits 2."""
    try:
        done = subprocess.run([str(binary)], capture_output=True, timeout=10, env={})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 2 and b"usage" in done.stderr


def wrapper_path(fallback_dir: Path | None = None) -> str | None:
    """The built wrapper, building it now if needed; None to use the Python wrapper.
    `fallback_dir`: where a non-root agent keeps it (its work dir)."""
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    try:
        source = SOURCE.read_bytes()
    except OSError:
        return None
    directory = SHARED_DIR if os.geteuid() == 0 else fallback_dir
    if directory is None:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as e:
        log.warning("cannot make a place for the C task wrapper", error=str(e))
        return None
    safe = safe_dir(directory)
    if safe is None:
        log.warning(
            "not using the C task wrapper: others could change its directory",
            directory=str(directory),
        )
        return None
    directory = safe
    builds = _builds(shutil.which("cc") or shutil.which("gcc"))
    target = directory / f"agora-task-wrapper-{_build_id(source, builds)}"
    if target.exists() and _trusted_file(target) and _answers(target):
        return str(target)
    if not builds:
        log.info("no C compiler: tasks get the Python wrapper (about 2 ms more CPU a task)")
        return None
    # Built beside its final name and renamed: agents starting together never run half a file.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    os.close(fd)
    try:
        _compile(builds, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())  # a crash must not leave a truncated binary under the name
        os.replace(tmp, target)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        log.warning(
            "cannot build the C task wrapper: tasks get the Python wrapper",
            error=str(e),
            detail=detail.decode(errors="replace")[-500:],
        )
        Path(tmp).unlink(missing_ok=True)
        return None
    return str(target)


def static_wrapper() -> str | None:
    """The built wrapper if it needs no C library at run time (no ELF interpreter): what a
    container whose image has none of ours can run as its init. None otherwise."""
    path = wrapper_path()
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
                return None
            order: Literal["little", "big"] = "little" if header[5] == 1 else "big"
            phoff = int.from_bytes(header[32:40], order)
            phentsize = int.from_bytes(header[54:56], order)
            phnum = int.from_bytes(header[56:58], order)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return None
    PT_INTERP = 3
    for i in range(phnum):
        if int.from_bytes(table[i * phentsize : i * phentsize + 4], order) == PT_INTERP:
            return None
    return path
