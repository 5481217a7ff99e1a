"""A task's OCI runtime configuration (config.json), for tasks that run from an image. Pure.

The agent runs such a task through an OCI runtime (runc; agent/containers.py says why), started
by the task's wrapper inside the task's cgroups, which nest the container's: limits, usage, OOM
and kill work as for any task. The container gets:

- its own pid, mount, ipc and uts namespaces, and the host's network unless the task asks for
  none (as Mesos' and Nomad's default);
- the image's root filesystem, read-only and shared by every task of that image, a private
  `/tmp` (tmpfs), `/proc` of its own pid namespace (so `ps` sees the task alone), and the
  sandbox mounted at SANDBOX (its working directory, where stdout and stderr are);
- no_new_privs, Docker's default capability set, a seccomp profile that refuses the calls a
  task has no business making (loading kernel modules, kexec, reboot, keyrings, bpf, ...), and
  the task's Unix user;
- the image's environment, then the task's (Agora's variables with the sandbox path as seen
  inside), and its entrypoint before the command's argv when the task gives argv (a shell
  command runs as `/bin/sh -c` in the image, as Marathon and Aurora run one).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SANDBOX", "runtime_config"]

SANDBOX = "/mnt/mesos/sandbox"  # where Mesos mounts a container's sandbox; tools know it
# Where a container's init is mounted (in its /dev, a tmpfs of its own: the image's files are
# shared by its tasks and read-only), as podman mounts catatonit.
INIT_PATH = "/dev/init"

# Docker's default capabilities: what most programs need and nothing that reaches the host.
CAPABILITIES = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]

# System calls refused with EPERM: the kernel's own administration, which no task needs and
# several container escapes went through (a deny list, as Docker's profile ends up for these).
DENIED_SYSCALLS = [
    "acct",
    "add_key",
    "bpf",
    "delete_module",
    "finit_module",
    "init_module",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "open_by_handle_at",
    "perf_event_open",
    "pivot_root",
    "reboot",
    "request_key",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "userfaultfd",
]


def runtime_config(
    *,
    argv: list[str],
    env: dict[str, str],
    rootfs: str,
    sandbox: str,
    uid: int,
    gid: int,
    groups: list[int],
    hostname: str,
    network: str = "host",
    tmp_bytes: int = 64 * 1024 * 1024,
    rlimits: dict[str, int] | None = None,
    cgroups_path: str = "",
    devices: list[tuple[str, int, int]] | None = None,
    init: str | None = None,
) -> dict[str, Any]:
    """config.json of one task's container. `env`: the whole environment inside (the image's
    and the task's, merged by the caller); `network`: "host" or "none"; `devices`: character
    devices (path, major, minor) it may use besides the runtime's defaults (its GPUs); `init`:
    a static binary that runs as the container's pid 1 (`INIT --init -- ARGV`), mounted at
    INIT_PATH, so a kill's SIGTERM reaches a command that does not handle it."""
    if init is not None:
        argv = [INIT_PATH, "--init", "--", *argv]
    namespaces = [{"type": t} for t in ("pid", "mount", "ipc", "uts")]
    if network == "none":
        namespaces.append({"type": "network"})
    caps = list(CAPABILITIES)
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, "additionalGids": groups},
            "args": argv,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": SANDBOX,
            "noNewPrivileges": True,
            "capabilities": {
                "bounding": caps,
                "effective": caps if uid == 0 else [],
                "permitted": caps if uid == 0 else [],
            },
            "rlimits": [
                {"type": name, "hard": value, "soft": value}
                for name, value in sorted((rlimits or {}).items())
            ],
        },
        "root": {"path": rootfs, "readonly": True},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
            },
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", f"size={tmp_bytes}"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
            {
                "destination": SANDBOX,
                "type": "bind",
                "source": sandbox,
                "options": ["rbind", "rw", "nosuid", "nodev"],
            },
            *(
                [
                    {
                        "destination": INIT_PATH,
                        "type": "bind",
                        "source": init,
                        "options": ["bind", "ro"],
                    }
                ]
                if init is not None
                else []
            ),
            # The host's name resolution, as Docker gives a container on the host's network.
            *(
                [
                    {
                        "destination": "/etc/resolv.conf",
                        "type": "bind",
                        "source": "/etc/resolv.conf",
                        "options": ["rbind", "ro"],
                    }
                ]
                if network == "host"
                else []
            ),
        ],
        "linux": {
            "namespaces": namespaces,
            **({"cgroupsPath": cgroups_path} if cgroups_path else {}),
            "devices": [
                {"path": path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666}
                for path, major, minor in devices or []
            ],
            "resources": {
                "devices": [
                    {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
                    for _, major, minor in devices or []
                ]
            },
            "maskedPaths": [
                "/proc/kcore",
                "/proc/keys",
                "/proc/timer_list",
                "/sys/firmware",
            ],
            "readonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
            "seccomp": {
                "defaultAction": "SCMP_ACT_ALLOW",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_AARCH64"],
                "syscalls": [{"names": DENIED_SYSCALLS, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
            },
        },
    }
