/* agora-task-wrapper: one task's wrapper, in C (the agent spawns it, agent/direct_spawn.py;
 * agent/native_wrapper.py builds it; agent/executor.py's Python wrapper is the reference and
 * the fallback).
 *
 * It does what the Python wrapper does, without a forked Python process per task (about 3 ms
 * of CPU a task, most of it copy-on-write faults of the launcher's heap):
 *
 *   agora-task-wrapper [--ns=TMP_BYTES:HIDE] [--rlimits=NAME:VALUE,...] RUN_DIR STDOUT STDERR
 *                      CWD USER NCGROUPS [CGROUP...] -- ARGV...
 *     USER      "-" (the wrapper's own), or "UID:GID:G1,G2,..." (groups may be empty)
 *     fd 3      the task's environment, "NAME=VALUE" strings each ended by a NUL, then an
 *               empty one (a lone NUL) and EOF: a cut environment is refused, not run
 *     stdout is the agent's (or the launcher's) report pipe; report lines start with the run id
 *     (RUN_DIR's last component).
 *
 * The wrapper itself runs with an empty environment (it usually runs as root: a task's
 * LD_PRELOAD must not reach it) and gives the task's environment to the task alone, which also
 * searches the task's PATH for the command, as Popen(env=...) does. The task's stdout and
 * stderr are opened by the task's process once it is the task's user, and never through a
 * symlink: a sandbox belongs to that user, who could otherwise point them at any file.
 *
 * The task's process is cloned (sharing the wrapper's memory until its exec, as posix_spawn's
 * child does), puts itself in its cgroups, its own process group and user, and execs
 * the command with stdin on /dev/null and stdout/stderr appended to the sandbox files; a
 * close-on-exec pipe carries any failure before the exec back here. The wrapper itself never
 * enters the task's cgroups (the Python wrapper steps in and out only to spare Python a fork).
 * It reports "started TASK_PID WRAPPER_PID WRAPPER_START START_TICKS" (or "error MESSAGE") in
 * one write shorter than PIPE_BUF, lets go of the pipe, writes wrapper.json, forwards SIGTERM
 * to the task's group, waits, kills what the task left in its group and cgroups (which the
 * agent then keeps for its next task or removes; where no agent watches, this wrapper removes
 * them after exit.json), and writes exit.json: {"exit_code": N} | {"signal": N} |
 * {"error": "..."}, with "memory_limit_hit".
 * Both JSON files are written in place over the placeholders the agent reserved (a full disk
 * does not stop that), else through a temporary file and a rename.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Closes fds first..last: close_range(2) by its number (musl has no wrapper for it), else (a
 * kernel before 5.9, or headers without the number) one by one up to 1024. */
static void close_fds(unsigned first, unsigned last) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, first, last, 0) == 0) return;
#endif
    for (unsigned fd = first; fd <= last && fd < 1024; fd++) close((int)fd);
}

#define MAX_REPORT 3000
#define IN_PLACE_MAX 4096

static const char *run_dir;
static char prefix[512];
static volatile pid_t task_pgid;

/* With --ns=TMP_BYTES:HIDE (agent --task-namespaces): the task runs in its own pid, mount, ipc
 * and uts namespaces, with a private /tmp of TMP_BYTES, /proc of its own, and HIDE (the agent's
 * sandboxes directory) hidden but for its own sandbox. NULL: a plain process. */
static const char *ns_spec;
/* With --rlimits=NAME:VALUE,...: the command's resource limits (soft and hard), set last. */
static const char *rlimit_spec;

/* The agent that spawned us, and the task's cgroups (set in main). */
static pid_t spawner;
static char **task_cgroups;
static int task_ncg;

/* Who the command becomes (parse_user). */
struct identity {
    int keep; /* "-": the wrapper's own */
    uid_t uid;
    gid_t gid;
    size_t ngroups;
    gid_t *groups;
};

/* What the task's command process needs from start_task, to the exec (run_command). */
struct command {
    int errfd;
    struct identity who;
    int out_dir, err_dir;
    const char *out_name, *err_name;
    char **argv, **envp;
    sigset_t mask; /* the signal mask it runs under */
};

/* What the task's first process starts from (start_task). */
struct task_start {
    int errfd, readfd; /* the failure pipe: the task's process writes, the wrapper reads */
    char **cgroups;
    int ncg;
    struct identity who;
    int bad_user; /* parse_user's errno: reported as the start's failure */
    const char *cwd, *out_path, *err_path;
    char **argv, **envp;
};

/* The stack a process that shares its parent's memory until its exec runs on (the task's,
 * or in namespaces the command's): the parent waits for that exec (CLONE_VFORK). */
static char exec_stack[256 * 1024] __attribute__((aligned(16)));

static _Noreturn void start_task(const struct task_start *start);
static _Noreturn void run_command(const struct command *command);
static int drop_capabilities(void);

/* After exit.json: where no agent watches (the agent is gone: we were re-parented; or it is
 * stopping: RUN_DIR/../../unwatched), nobody will keep or remove the task's cgroups but us.
 * Checked after exit.json, so a stopping agent that found no exit.json is sure to have left
 * its mark before this. */
static void let_go(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/../../unwatched", run_dir);
    if (getppid() != spawner || access(path, F_OK) == 0)
        for (int i = 0; i < task_ncg; i++) rmdir(task_cgroups[i]);
}

static void forward(int signum) {
    if (task_pgid > 0) kill(-task_pgid, signum);
}

/* One report line on the report pipe (one write), then the pipe is let go. */
static void report(const char *line) {
    char buf[MAX_REPORT + 600];
    int n = snprintf(buf, sizeof buf, "%s%s", prefix, line);
    if (n < 0) n = 0;
    if (n > MAX_REPORT) {
        n = MAX_REPORT;
        while (n > 0 && ((unsigned char)buf[n] & 0xC0) == 0x80) n--; /* a whole character */
    }
    for (int i = 0; i < n; i++)
        if (buf[i] == '\n') buf[i] = ' ';
    buf[n++] = '\n';
    while (write(1, buf, n) < 0 && errno == EINTR) {
    }
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 1);
        close(null);
    }
}

/* text as a JSON string's content (quotes and backslashes escaped, controls as \u00XX). */
static void json_escape(char *out, size_t size, const char *text) {
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && j + 7 < size; p++) {
        if (*p == '"' || *p == '\\') {
            out[j++] = '\\';
            out[j++] = *p;
        } else if (*p < 0x20) {
            j += snprintf(out + j, size - j, "\\u%04x", *p);
        } else {
            out[j++] = *p;
        }
    }
    out[j] = 0;
}

/* Writes RUN_DIR/name: in place over the reserved placeholder, else via a temporary file. */
static void write_json(const char *name, const char *json) {
    char path[4096], tmp[4096];
    size_t len = strlen(json);
    snprintf(path, sizeof path, "%s/%s", run_dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        struct stat st;
        if (len <= IN_PLACE_MAX && fstat(fd, &st) == 0 && st.st_size <= IN_PLACE_MAX) {
            char buf[IN_PLACE_MAX + 1];
            size_t total = (size_t)st.st_size > len ? (size_t)st.st_size : len;
            memcpy(buf, json, len);
            memset(buf + len, ' ', total - len);
            ssize_t ignored = pwrite(fd, buf, total, 0);
            (void)ignored;
            close(fd);
            return;
        }
        close(fd);
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", run_dir, name);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return;
    ssize_t ignored = write(fd, json, len);
    (void)ignored;
    close(fd);
    rename(tmp, path);
}

/* Drops an incomplete UTF-8 sequence that snprintf's truncation left at the end of text. */
static void utf8_trim(char *text) {
    size_t len = strlen(text), tail = 0;
    while (tail < len && tail < 3 && ((unsigned char)text[len - 1 - tail] & 0xC0) == 0x80) tail++;
    if (tail == len) return;
    unsigned char lead = (unsigned char)text[len - 1 - tail];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > tail + 1) text[len - 1 - tail] = 0;
}

static void fail(char *message) {
    utf8_trim(message);
    char escaped[7 * MAX_REPORT], json[7 * MAX_REPORT + 32];
    json_escape(escaped, sizeof escaped, message);
    snprintf(json, sizeof json, "{\"error\": \"%s\"}", escaped);
    write_json("exit.json", json);
    let_go();
    char line[MAX_REPORT];
    snprintf(line, sizeof line, "error %s", message);
    report(line);
}

/* All of fd to EOF, NUL-terminated (the caller frees it); NULL on an error. */
static char *read_all(int fd, size_t *length) {
    size_t size = 4096, used = 0;
    char *buf = malloc(size);
    while (buf) {
        if (used + 1 >= size) {
            char *bigger = realloc(buf, size *= 2);
            if (!bigger) break;
            buf = bigger;
        }
        ssize_t n = read(fd, buf + used, size - used - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (n == 0) {
            buf[used] = 0;
            if (length) *length = used;
            return buf;
        }
        used += (size_t)n;
    }
    free(buf);
    return NULL;
}

/* A whole (small, /proc or cgroup) file; NULL if it cannot be read. */
static char *read_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    char *text = read_all(fd, NULL);
    close(fd);
    return text;
}

/* A process's start, in clock ticks since boot: field 22 of its stat (freed here); -1 for
 * none. */
static long long stat_start_ticks(char *stat) {
    char *p = stat ? strrchr(stat, ')') : NULL;
    long long ticks = -1;
    if (p) {
        p += 2; /* field 3, the state */
        for (int field = 3; field < 22 && p; field++) {
            p = strchr(p, ' ');
            if (p) p++;
        }
        if (p) ticks = atoll(p);
    }
    free(stat);
    return ticks;
}

/* Start time of this process (/proc/self/stat). */
static long long start_ticks(void) { return stat_start_ticks(read_file("/proc/self/stat")); }

/* The memory limit if the OOM killer acted in these cgroups (v2, then v1), else -1. */
static long long memory_limit_hit(char **cgroups, int n) {
    static const char *files[][2] = {{"memory.events", "memory.max"},
                                     {"memory.oom_control", "memory.limit_in_bytes"}};
    char path[4096];
    for (int i = 0; i < n; i++) {
        for (int f = 0; f < 2; f++) {
            snprintf(path, sizeof path, "%s/%s", cgroups[i], files[f][0]);
            char *events = read_file(path);
            if (!events) continue;
            char *p = strstr(events, "oom_kill ");
            int hit = p && (p == events || p[-1] == '\n') && atoll(p + 9) > 0;
            free(events);
            if (!hit) continue;
            snprintf(path, sizeof path, "%s/%s", cgroups[i], files[f][1]);
            char *limit = read_file(path);
            long long value = limit ? atoll(limit) : 0; /* "max" reads as 0, as in Python */
            free(limit);
            return value;
        }
    }
    return -1;
}

/* SIGKILLs every process in the cgroup `dir` and in the cgroups beneath it (a container's
 * runtime nests one: agora.agent.containers), depth at most 4; whether it found any. */
static int kill_cgroup_tree(const char *dir, int depth) {
    char path[4096];
    int found = 0;
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    char *procs = read_file(path);
    if (procs) {
        for (char *p = strtok(procs, " \n"); p; p = strtok(NULL, " \n")) {
            pid_t pid = (pid_t)atoi(p);
            if (pid > 0 && pid != getpid()) {
                kill(pid, SIGKILL);
                found = 1;
            }
        }
        free(procs);
    }
    if (depth >= 4) return found;
    DIR *d = opendir(dir);
    if (!d) return found;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        found |= kill_cgroup_tree(path, depth + 1);
    }
    closedir(d);
    return found;
}

/* Kills what escaped the process group but not the cgroups. The agent removes them after, or
 * keeps them for its next task if it finds them empty and clean (agora.agent.isolation). */
static void empty_cgroups(char **cgroups, int n) {
    for (int round = 0; round < 50; round++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= kill_cgroup_tree(cgroups[i], 0);
        if (!found) break;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

/* The Python wrapper's words for a failed start (agent/executor.py). */
static const char *what(int err) {
    if (err == ENOENT) return "command not found";
    if (err == EACCES || err == EPERM) return "permission denied";
    return strerror(err);
}

/* A log of the task's, appended to: a plain file only (a FIFO does not block the open). */
static int open_log(int dir, const char *name) {
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                    0666);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        errno = EACCES;
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* The directory holding `path` (O_PATH), and in *name the last component. */
static int open_parent(const char *path, const char **name) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *name = path;
        return open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    *name = slash + 1;
    if (slash == path) return open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* execve of the command, searching the task's PATH as Popen does (no retry through /bin/sh
 * for a file without a shebang: that is an "Exec format error", as in Python). */
static int exec_command(char **argv, char **envp) {
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, envp);
        return errno;
    }
    const char *path = "/bin:/usr/bin"; /* Python's os.defpath */
    for (char **e = envp; *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
    int first = 0;
    char candidate[8192];
    for (const char *p = path;; p++) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        snprintf(candidate, sizeof candidate, "%.*s%s%s", (int)len, p, len ? "/" : "", argv[0]);
        execve(candidate, argv, envp);
        if (errno != ENOENT && errno != ENOTDIR && !first) first = errno;
        if (!end) break;
        p = end;
    }
    return first ? first : ENOENT;
}

/* A failure before the exec, on the failure pipe: "KIND ERRNO [INDEX]" in one write. Not
 * dprintf: glibc's (before 2.37) allocates a stream and links it into the library's list, in
 * memory the wrapper shares with this process until the exec. */
static void tell(int fd, const char *kind, int code, int index) {
    char line[64];
    int n = index < 0 ? snprintf(line, sizeof line, "%s %d", kind, code)
                      : snprintf(line, sizeof line, "%s %d %d", kind, code, index);
    ssize_t ignored = write(fd, line, (size_t)n);
    (void)ignored;
}

/* The init holds nothing of the wrapper's (its report pipe, its log) for the task's life:
 * its standard streams go to /dev/null. */
static void let_go_of_stdio(void) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) return;
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    if (null > 2) close(null);
}

/* The kernel's seccomp and classic BPF ABI, spelled out here: musl's headers do not carry the
 * kernel's (linux/filter.h, linux/seccomp.h, linux/audit.h), and these values are fixed ABI. */
#if defined(__x86_64__)
#define NATIVE_ARCH 0xC000003Eu /* AUDIT_ARCH_X86_64 */
#elif defined(__aarch64__)
#define NATIVE_ARCH 0xC00000B7u /* AUDIT_ARCH_AARCH64 */
#endif
struct bpf_insn {
    uint16_t code;
    uint8_t jt, jf;
    uint32_t k;
};
struct bpf_prog {
    unsigned short len;
    struct bpf_insn *filter;
};
#define LOAD_WORD(offset) ((struct bpf_insn){0x20 /* LD|W|ABS */, 0, 0, (offset)})
#define JUMP_IF(op, value, yes, no) ((struct bpf_insn){(uint16_t)(0x05 | (op)), (yes), (no), (value)})
#define JEQ 0x10
#define JGE 0x30
#define RETURN(value) ((struct bpf_insn){0x06 /* RET|K */, 0, 0, (value)})
#define SECCOMP_DATA_NR 0
#define SECCOMP_DATA_ARCH 4
#define RET_ALLOW 0x7fff0000u
#define RET_EPERM (0x00050000u | EPERM) /* SECCOMP_RET_ERRNO */
#define MODE_FILTER 2 /* SECCOMP_MODE_FILTER */

/* The denied calls' numbers, sorted, searched by halves down to runs of at most SEARCH_RUN:
 * each run a chain of JEQs ending in its own RET ALLOW and RET EPERM, so every jump is short
 * and forward. The kernel runs the filter through once per call number when it is loaded
 * (its cache of calls always allowed, under the task's signal lock): an allowed call takes
 * about a dozen instructions this way where a single chain took all 35, and loading the
 * filter costs a task about a third less. Returns the instructions written at filter[at]. */
enum { SEARCH_RUN = 3 };
static int search_calls(struct bpf_insn *filter, int at, const uint32_t *nrs, int n) {
    int start = at;
    if (n <= SEARCH_RUN) {
        for (int k = 0; k < n; k++) filter[at++] = JUMP_IF(JEQ, nrs[k], (uint8_t)(n - k), 0);
        filter[at++] = RETURN(RET_ALLOW);
        filter[at++] = RETURN(RET_EPERM);
        return at - start;
    }
    int half = n / 2, node = at++;
    at += search_calls(filter, at, nrs, half); /* below nrs[half] */
    filter[node] = JUMP_IF(JGE, nrs[half], (uint8_t)(at - node - 1), 0);
    at += search_calls(filter, at, nrs + half, n - half);
    return at - start;
}

/* Room for a filter of 64 calls: a node per halving, a JEQ per call, two RETs per run. */
enum { MAX_FILTER = 4 * 64 + 8 };

/* A namespaced task's seccomp filter, into filter[MAX_FILTER]: the kernel's administration
 * refused with EPERM (as agent/oci.py's profile does for a container), and with it mount,
 * umount and pivot_root, so that a task running as root cannot lift the tmpfs that hides the
 * other sandboxes; calls of another architecture (i386's int 0x80 on x86_64, x32) are refused
 * too, so none of these goes round the list. How many instructions, or -1 where there is no
 * filter for this architecture. */
static int build_filter(struct bpf_insn *filter) {
#ifdef NATIVE_ARCH
    static const int denied[] = {
        __NR_acct, __NR_add_key, __NR_bpf, __NR_delete_module, __NR_finit_module,
        __NR_init_module, __NR_kexec_file_load, __NR_kexec_load, __NR_keyctl, __NR_mount,
        __NR_open_by_handle_at, __NR_perf_event_open, __NR_pivot_root, __NR_reboot,
        __NR_request_key, __NR_setns, __NR_swapoff, __NR_swapon, __NR_syslog, __NR_umount2,
        __NR_unshare, __NR_userfaultfd,
        /* The new mount API (Linux 5.2, 5.12): the same numbers on x86_64 and arm64, spelled
         * out because older C libraries do not name them. */
        428 /* open_tree */, 429 /* move_mount */, 430 /* fsopen */, 431 /* fsconfig */,
        432 /* fsmount */, 433 /* fspick */, 442 /* mount_setattr */,
    };
    enum { N = sizeof denied / sizeof *denied };
    _Static_assert(N <= 64, "MAX_FILTER holds 64 calls");
    uint32_t nrs[N];
    for (int k = 0; k < N; k++) { /* sorted, by insertion: a handful */
        int j = k;
        for (; j > 0 && nrs[j - 1] > (uint32_t)denied[k]; j--) nrs[j] = nrs[j - 1];
        nrs[j] = (uint32_t)denied[k];
    }
    int i = 0;
    filter[i++] = LOAD_WORD(SECCOMP_DATA_ARCH);
    filter[i++] = JUMP_IF(JEQ, NATIVE_ARCH, 1, 0);
    filter[i++] = RETURN(RET_EPERM);
    filter[i++] = LOAD_WORD(SECCOMP_DATA_NR);
#if defined(__x86_64__)
    filter[i++] = JUMP_IF(JGE, 0x40000000u, 0, 1); /* x32's bit: another architecture */
    filter[i++] = RETURN(RET_EPERM);
#endif
    return i + search_calls(filter, i, nrs, N);
#else
    (void)filter;
    return -1;
#endif
}

/* Loads build_filter's filter on this process: 0, or an errno. */
static int deny_syscalls(void) {
    struct bpf_insn filter[MAX_FILTER];
    int n = build_filter(filter);
    if (n < 0) return ENOSYS; /* no filter for this architecture: the task does not run */
    struct bpf_prog prog = {.len = (unsigned short)n, .filter = filter};
    if (prctl(PR_SET_SECCOMP, MODE_FILTER, &prog) < 0) return errno;
    return 0;
}

/* agora-task-wrapper --seccomp-filter: the filter's instructions on stdout, as the kernel
 * takes them (8 bytes each, in this machine's byte order), for a test to run. */
static int print_filter(void) {
    struct bpf_insn filter[MAX_FILTER];
    int n = build_filter(filter);
    if (n < 0) return 1;
    return write(1, filter, n * sizeof *filter) == (ssize_t)(n * sizeof *filter) ? 0 : 1;
}

/* Capabilities a root command keeps (Docker's default set); the others leave its bounding set,
 * so after its exec root has none of them (no mount, module, raw I/O, ptrace, admin...). */
static int drop_capabilities(void) {
    static const int kept[] = {0 /* CHOWN */,  1 /* DAC_OVERRIDE */, 3 /* FOWNER */,
                               4 /* FSETID */, 5 /* KILL */,         6 /* SETGID */,
                               7 /* SETUID */, 8 /* SETPCAP */,      10 /* NET_BIND_SERVICE */,
                               13 /* NET_RAW */, 18 /* SYS_CHROOT */, 27 /* MKNOD */,
                               29 /* AUDIT_WRITE */, 31 /* SETFCAP */};
    for (int cap = 0; cap < 64; cap++) {
        int keep = 0;
        for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) keep |= kept[i] == cap;
        if (keep) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL) break; /* past the kernel's last capability */
            return errno;
        }
    }
    return 0;
}

/* mkdir -p of an absolute path (in a fresh tmpfs: as root, 0755, so the task may traverse). */
static int make_path(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* Whether `path` is `dir` or beneath it. */
static int beneath(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0);
}

/* In the task's new mount namespace, as its pid 1: its /proc, a private /tmp and /dev/shm, and
 * the agent's sandboxes hidden but for its own (the cwd, bound back at its path). A work dir
 * under /tmp or /dev/shm is hidden by their fresh tmpfs already. 0, or an errno. */
static int set_up_mounts(const char *cwd, unsigned long long tmp_bytes, const char *hide) {
    char options[64];
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return errno;
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) return errno;
    snprintf(options, sizeof options, "size=%llu,mode=1777", tmp_bytes);
    if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, options) < 0) return errno;
    /* Shared memory of its own too, and no cgroup file system to move itself out of its
     * limits with (root could write its pid into the root cgroup): an empty directory bound
     * over it and then removed, in which nothing can be created (cheaper than a file system
     * of its own, which each task would make and tear down). */
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0) return errno;
    if (access("/sys/fs/cgroup", F_OK) == 0) {
        const char *empty = "/tmp/.agora-empty";
        if (mkdir(empty, 0555) < 0 || mount(empty, "/sys/fs/cgroup", NULL, MS_BIND, NULL) < 0 ||
            rmdir(empty) < 0)
            return errno;
    }
    int fresh = beneath(hide, "/tmp") || beneath(hide, "/dev/shm");
    if (!fresh && mount("tmpfs", hide, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
        return errno;
    /* Its own sandbox back where it was (the cwd still reaches the real one). */
    if (beneath(cwd, hide) || beneath(cwd, "/tmp") || beneath(cwd, "/dev/shm")) {
        if (make_path(cwd) < 0) return errno;
        if (mount(".", cwd, NULL, MS_BIND | MS_REC, NULL) < 0) return errno;
        if (chdir(cwd) < 0) return errno;
    }
    return 0;
}

/* The task's own namespaces (ns_spec): the wrapper clones the task's first process straight
 * into new pid, mount, ipc and uts namespaces (clone_task), where it is pid 1: a small init
 * that reaps, and ignores the signals it does not catch, so a SIGTERM reaches the command
 * alone. The wrapper waits for it as for a plain task's process. */
static int status_pipe[2] = {-1, -1}; /* the init sends the command's wait status on it */

/* In the task's first process: never returns. */
static int task_main(void *arg) {
    const struct task_start *start = arg;
    close(start->readfd);
    start_task(start);
}

/* The task's first process, in namespaces of its own when ns_spec says so: a raw clone with
 * the namespace flags, as fork is a clone, one process fewer than an unshare in the child,
 * which would need a process outside to wait for its init. Without namespaces it shares this
 * process's memory until its exec, as posix_spawn's child does: no copy of the page tables, no
 * copy-on-write faults on either side, nothing to unmap at the exec. */
static pid_t clone_task(struct task_start *start) {
    if (!ns_spec)
        return clone(task_main, exec_stack + sizeof exec_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                     start);
    if (pipe2(status_pipe, O_CLOEXEC) < 0) return -1;
    long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
    pid_t pid = (pid_t)syscall(SYS_clone, flags, 0, 0, 0, 0);
    if (pid == 0) task_main(start);
    if (pid > 0) close(status_pipe[1]);
    return pid;
}

/* The kill's signal, in the init, to the task's processes that left its process group (a
 * daemon the command started with setsid): the group got it from outside already, these would
 * otherwise get nothing before the SIGKILL that ends the namespace. Only a signal sent from
 * outside the namespace (si_pid 0 here) is passed on. In the handler itself, with system calls
 * alone: the init's main loop waits in waitpid, and nothing else runs. */
struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static void pass_on_to_strays(int signum, siginfo_t *info, void *context) {
    (void)context;
    if (info->si_pid != 0) return; /* from inside: the task's own business */
    int saved = errno;
    int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char entries[4096];
    long got;
    while (proc >= 0 && (got = syscall(SYS_getdents64, proc, entries, sizeof entries)) > 0) {
        for (long at = 0; at < got;) {
            struct linux_dirent64 *entry = (struct linux_dirent64 *)(entries + at);
            at += entry->d_reclen;
            char *end;
            long pid = strtol(entry->d_name, &end, 10);
            if (*end || pid <= 1) continue;
            char path[64], stat[512];
            snprintf(path, sizeof path, "/proc/%ld/stat", pid);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            ssize_t n = fd < 0 ? -1 : read(fd, stat, sizeof stat - 1);
            if (fd >= 0) close(fd);
            if (n <= 0) continue;
            stat[n] = 0;
            char *p = strrchr(stat, ')'); /* then: state, ppid, pgrp */
            long ppid, pgrp;
            char state;
            if (p && sscanf(p + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 && pgrp != 1)
                kill((pid_t)pid, signum);
        }
    }
    if (proc >= 0) close(proc);
    errno = saved;
}

/* The signals a kill sends, which the init passes on (pass_on_to_strays). */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
enum { FORWARDED = sizeof forwarded / sizeof *forwarded };

/* In the command's process, cloned by its init: drops what the command must not have, then
 * runs it (run_command). Shares the init's memory to the exec: writes nothing the init
 * reads, allocates nothing. */
static int command_main(void *arg) {
    const struct command *command = arg;
    close(status_pipe[1]);
    int dropped = drop_capabilities(); /* while still root: it takes CAP_SETPCAP */
    if (dropped) {
        tell(command->errfd, "ns", dropped, -1);
        _exit(127);
    }
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int i = 0; i < FORWARDED; i++) sigaction(forwarded[i], &dfl, NULL);
    sigprocmask(SIG_SETMASK, &command->mask, NULL);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); /* no setuid program gives it back root */
    run_command(command);
}

/* In the init (the cloned child, pid 1 of its namespaces, still root): mounts, then the
 * command's process is cloned (command_main) and this process reaps until it ends, sends its
 * wait status on status_pipe and exits; the namespace, and whatever the command left in it,
 * ends with it. An error is reported on the command's errfd (as a failed exec is). */
static _Noreturn void be_init(struct command *command, const char *cwd) {
    unsigned long long tmp_bytes = strtoull(ns_spec, NULL, 10);
    const char *hide = strchr(ns_spec, ':');
    hide = hide ? hide + 1 : "";
    close(status_pipe[0]);
    /* Not to be traced or read by the command (root in the command could otherwise make it
     * undo the mounts). */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    int err = set_up_mounts(cwd, tmp_bytes, hide);
    if (err) {
        tell(command->errfd, "ns", err, -1);
        _exit(127);
    }
    sethostname("task", 4);
    /* Signals reach the whole group: the init lives through them, and passes a kill's on to
     * what left the group (a handler, reset by the command's exec; an init without one would
     * ignore them anyway). */
    struct sigaction quiet = {.sa_sigaction = pass_on_to_strays, .sa_flags = SA_SIGINFO};
    for (int i = 0; i < FORWARDED; i++) sigaction(forwarded[i], &quiet, NULL);
    /* The command's process shares this one's memory until its exec, as posix_spawn's child
     * does (CLONE_VM | CLONE_VFORK: this process waits for the exec): no copy of the page
     * tables, no copy-on-write faults on either side, nothing to unmap at the exec. On a
     * stack of its own, with every signal held until its handlers are the defaults again
     * (it has its own copy of them, so none of this process's runs there). */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &command->mask);
    pid_t pid = clone(command_main, exec_stack + sizeof exec_stack,
                      CLONE_VM | CLONE_VFORK | SIGCHLD, command);
    err = pid < 0 ? errno : 0;
    /* The command's change of user reset the memory's dumpable flag, which was this one's
     * too until its exec: not traceable again. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    sigprocmask(SIG_SETMASK, &command->mask, NULL);
    if (pid < 0) {
        tell(command->errfd, "ns", err, -1);
        _exit(127);
    }
    close(command->errfd);
    let_go_of_stdio();
    for (;;) { /* reap everything; end with the command */
        int status;
        pid_t gone = waitpid(-1, &status, 0);
        if (gone < 0 && errno == EINTR) continue;
        if (gone < 0 || gone == pid) {
            if (gone == pid) write(status_pipe[1], &status, sizeof status);
            _exit(0);
        }
    }
}

/* rlimit_spec's limits on this process (the command's, before its exec); 0 or an errno. */
static int set_rlimits(void) {
    static const struct {
        const char *name;
        int resource;
    } names[] = {
        {"as", RLIMIT_AS},         {"core", RLIMIT_CORE},       {"cpu", RLIMIT_CPU},
        {"data", RLIMIT_DATA},     {"fsize", RLIMIT_FSIZE},     {"memlock", RLIMIT_MEMLOCK},
        {"nofile", RLIMIT_NOFILE}, {"nproc", RLIMIT_NPROC},     {"stack", RLIMIT_STACK},
    };
    for (const char *p = rlimit_spec; p && *p;) {
        const char *colon = strchr(p, ':');
        if (!colon) return EINVAL;
        size_t len = (size_t)(colon - p);
        char *end;
        unsigned long long value = strtoull(colon + 1, &end, 10);
        if (end == colon + 1 || (*end && *end != ',')) return EINVAL;
        int found = 0;
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            if (strlen(names[i].name) == len && strncmp(p, names[i].name, len) == 0) {
                struct rlimit limit = {(rlim_t)value, (rlim_t)value};
                if (setrlimit(names[i].resource, &limit) < 0) return errno;
                found = 1;
            }
        }
        if (!found) return EINVAL;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* Parses USER ("-": stays who it is; else "UID:GID:G1,G2,...") into *who: 0, or an errno.
 * Apart from become(), which must allocate nothing: the task's process runs it sharing its
 * parent's memory (the wrapper's, or in namespaces the init's) until the exec. */
static int parse_user(const char *user, struct identity *who) {
    *who = (struct identity){.keep = strcmp(user, "-") == 0};
    if (who->keep) return 0;
    unsigned uid, gid;
    int used = 0;
    if (sscanf(user, "%u:%u:%n", &uid, &gid, &used) < 2) return EINVAL;
    const char *list = user + used;
    size_t count = *list ? 1 : 0;
    for (const char *p = list; *p; p++) count += *p == ',';
    gid_t *groups = calloc(count ? count : 1, sizeof(gid_t));
    if (!groups) return ENOMEM;
    size_t ngroups = 0;
    for (char *p = (char *)list; *p && ngroups < count;) {
        groups[ngroups++] = (gid_t)strtoul(p, &p, 10);
        if (*p == ',') p++;
        else break;
    }
    *who = (struct identity){0, uid, gid, ngroups, groups};
    return 0;
}

/* Becomes who (parse_user's): 0, or an errno. */
static int become(const struct identity *who) {
    if (who->keep) return 0;
    if (setgroups(who->ngroups, who->groups) < 0 || setregid(who->gid, who->gid) < 0 ||
        setreuid(who->uid, who->uid) < 0)
        return errno;
    return 0;
}

/* agora-task-wrapper --enter=PID:START USER CWD -- ARGV...: runs ARGV in the namespaces of
 * process PID (a task's init: its pid, mount, ipc, uts and network namespaces, and so its
 * root and /tmp), in CWD there, as USER, under what the task itself runs under (Docker's
 * default capabilities, no_new_privs, the seccomp filter), with this process's environment;
 * ends as ARGV ended. START is the process's start in clock ticks (field 22 of its stat): a pid reused
 * since is refused, and every namespace is opened through one /proc/PID directory, which
 * stays that process's. A command health check of a task in namespaces runs so. */
static int enter_task(const char *target, const char *user, const char *cwd, char **argv) {
    /* Its network too: the host's unless the task has its own (an image's "none"). */
    static const char *kinds[] = {"ns/ipc", "ns/uts", "ns/net", "ns/pid", "ns/mnt"};
    enum { KINDS = sizeof kinds / sizeof *kinds };
    long pid = 0;
    long long start = -1;
    int used = 0;
    if (sscanf(target, "%ld:%lld%n", &pid, &start, &used) < 2 || target[used] || pid <= 0) {
        fprintf(stderr, "agora-task-wrapper: --enter=%s: give PID:START_TICKS\n", target);
        return 2;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld", pid);
    int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int stat_fd = dir < 0 ? -1 : openat(dir, "stat", O_RDONLY | O_CLOEXEC);
    size_t length = 0;
    long long ticks = stat_start_ticks(stat_fd < 0 ? NULL : read_all(stat_fd, &length));
    if (stat_fd >= 0) close(stat_fd);
    if (ticks != start) {
        fprintf(stderr, "agora-task-wrapper: process %ld is not the task's any more\n", pid);
        return 125;
    }
    int fds[KINDS];
    for (int i = 0; i < KINDS; i++) {
        fds[i] = openat(dir, kinds[i], O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            fprintf(stderr, "agora-task-wrapper: cannot open %s/%s: %s\n", path, kinds[i],
                    strerror(errno));
            return 125;
        }
    }
    close(dir);
    for (int i = 0; i < KINDS; i++) {
        /* Entering a mount namespace sets the root and cwd to its root: an image's, there. */
        if (setns(fds[i], 0) < 0) {
            fprintf(stderr, "agora-task-wrapper: cannot enter the task's %s: %s\n", kinds[i],
                    strerror(errno));
            return 125;
        }
        close(fds[i]);
    }
    pid_t child = fork(); /* the pid namespace holds the children of who entered it */
    if (child < 0) return 125;
    if (child == 0) {
        struct identity who;
        int err = chdir(cwd) < 0 ? errno : drop_capabilities();
        if (!err) err = parse_user(user, &who);
        if (!err) err = become(&who);
        if (!err && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) err = errno;
        if (!err) err = deny_syscalls();
        if (!err) err = exec_command(argv, environ);
        fprintf(stderr, "agora-task-wrapper: cannot run '%s' in the task: %s\n", argv[0],
                strerror(err));
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return 125;
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* agora-task-wrapper --init -- ARGV...: pid 1 of a task's container (mounted there at
 * /dev/init, as podman mounts catatonit): runs ARGV, passes on the signals a kill sends (a
 * pid namespace's init gets only those it handles, so a command that is pid 1 itself would
 * ignore a SIGTERM and wait out its kill grace), reaps what is orphaned, and ends as ARGV
 * ended (128 + the signal that killed it, as a shell says). */
static pid_t container_command;
static void pass_on(int signum) {
    if (container_command > 0) kill(container_command, signum);
}

static int be_container_init(char **argv) {
    int passed[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    enum { PASSED = sizeof passed / sizeof *passed };
    sigset_t held, old;
    sigemptyset(&held);
    for (int i = 0; i < PASSED; i++) sigaddset(&held, passed[i]);
    sigprocmask(SIG_BLOCK, &held, &old); /* none lost before the command's pid is known */
    struct sigaction on = {.sa_handler = pass_on, .sa_flags = SA_RESTART};
    for (int i = 0; i < PASSED; i++) sigaction(passed[i], &on, NULL);
    container_command = fork();
    if (container_command == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int i = 0; i < PASSED; i++) sigaction(passed[i], &dfl, NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        int err = exec_command(argv, environ);
        fprintf(stderr, "cannot run '%s': %s\n", argv[0], what(err));
        _exit(err == ENOENT ? 127 : 126);
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (container_command < 0) {
        fprintf(stderr, "cannot run '%s': %s\n", argv[0], strerror(errno));
        return 126;
    }
    for (;;) {
        int status;
        pid_t gone = waitpid(-1, &status, 0);
        if (gone < 0 && errno == EINTR) continue;
        if (gone < 0) return 126;
        if (gone == container_command)
            return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
}

/* In the task's first process (clone_task): never returns. Failures go to the failure pipe
 * as "KIND ERRNO [INDEX]". Allocates nothing: without namespaces it shares the wrapper's
 * memory. */
static _Noreturn void start_task(const struct task_start *start) {
    int errfd = start->errfd, ncg = start->ncg;
    char **cgroups = start->cgroups;
    const char *cwd = start->cwd;
    char msg[64];
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    sigaction(SIGXFSZ, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    snprintf(msg, sizeof msg, "%d", getpid());
    for (int i = 0; i < ncg; i++) {
        /* Cgroup v1: "0" into `tasks` moves the calling thread, which right after the clone is
         * the whole process, and spares the kernel's write lock on every thread group that a
         * move by pid takes (an RCU grace period: 5-15 ms of an idle agent's launch, more
         * than all the rest of it). Cgroup v2 has no `tasks`: its cgroup.procs takes the pid. */
        char path[4096];
        const char *who = "0";
        snprintf(path, sizeof path, "%s/tasks", cgroups[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
            who = msg;
            snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[i]);
            fd = open(path, O_WRONLY | O_CLOEXEC);
        }
        if (fd < 0 || write(fd, who, strlen(who)) < 0) {
            tell(errfd, "cgroup", errno, i);
            _exit(127);
        }
        close(fd);
    }
    setpgid(0, 0);
    /* Before giving up root: the sandbox's parents need not be open to the task's user (the
     * files are opened below through their directories, found now). */
    const char *out_name, *err_name;
    int out_dir = open_parent(start->out_path, &out_name);
    int err_dir = open_parent(start->err_path, &err_name);
    if (chdir(cwd) < 0 || out_dir < 0 || err_dir < 0) {
        tell(errfd, "exec", errno, -1);
        _exit(127);
    }
    if (start->bad_user) {
        tell(errfd, "exec", start->bad_user, -1);
        _exit(127);
    }
    struct command command = {.errfd = errfd, .who = start->who, .out_dir = out_dir,
                              .err_dir = err_dir, .out_name = out_name, .err_name = err_name,
                              .argv = start->argv, .envp = start->envp, .mask = none};
    if (ns_spec) be_init(&command, cwd); /* the command runs in a process the init clones */
    run_command(&command);
}

/* The command's process, from its user on to the exec: never returns. */
static _Noreturn void run_command(const struct command *command) {
    int errfd = command->errfd;
    int switched = become(&command->who);
    if (switched) {
        tell(errfd, "exec", switched, -1);
        _exit(127);
    }
    /* As the task's user, and never through a symlink: see the top of this file. */
    int out = open_log(command->out_dir, command->out_name);
    int err = out < 0 ? -1 : open_log(command->err_dir, command->err_name);
    int null = err < 0 ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
        tell(errfd, "exec", errno, -1);
        _exit(127);
    }
    int limited = set_rlimits();
    if (limited) {
        tell(errfd, "exec", limited, -1);
        _exit(127);
    }
    if (ns_spec) {
        int refused = deny_syscalls(); /* last: the set-up above needed some of them */
        if (refused) {
            tell(errfd, "ns", refused, -1);
            _exit(127);
        }
    }
    /* Nothing else of the wrapper's stays open in the task (the error pipe closes on exec;
     * what was opened here is close-on-exec, which dup2 does not pass to 0, 1 and 2). */
    if (errfd > 3) close_fds(3, (unsigned)errfd - 1);
    close_fds((unsigned)errfd + 1, ~0U);
    tell(errfd, "exec", exec_command(command->argv, command->envp), -1);
    _exit(127);
}

/* The task's environment from fd 3 ("NAME=VALUE\0" each, then "\0"); NULL if it is not all
 * there (its spawner died while writing it). */
static char **read_environment(void) {
    size_t length = 0;
    char *text = read_all(3, &length);
    close(3);
    if (!text) return NULL;
    if (length == 0 || text[length - 1] != 0 || (length > 1 && text[length - 2] != 0)) {
        free(text);
        return NULL;
    }
    length--; /* the empty string that ends the block */
    size_t count = 0;
    for (size_t i = 0; i < length; i++) count += text[i] == 0;
    char **envp = calloc(count + 1, sizeof(char *));
    if (!envp) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < length && n < count; i += strlen(text + i) + 1) envp[n++] = text + i;
    envp[n] = NULL;
    return envp;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--seccomp-filter") == 0) return print_filter();
    if (argc > 3 && strcmp(argv[1], "--init") == 0 && strcmp(argv[2], "--") == 0)
        return be_container_init(argv + 3);
    if (argc > 1 && strncmp(argv[1], "--enter=", 8) == 0) {
        if (argc < 6 || strcmp(argv[4], "--") != 0) {
            fprintf(stderr, "usage: agora-task-wrapper --enter=PID:START USER CWD -- ARGV...\n");
            return 2;
        }
        return enter_task(argv[1] + 8, argv[2], argv[3], argv + 5);
    }
    while (argc > 1 && (strncmp(argv[1], "--ns=", 5) == 0 || strncmp(argv[1], "--rlimits=", 10) == 0)) {
        if (argv[1][2] == 'n') ns_spec = argv[1] + 5;
        else rlimit_spec = argv[1] + 10;
        argv[1] = argv[0];
        argv++;
        argc--;
    }
    if (argc < 8) {
        fprintf(stderr,
                "usage: agora-task-wrapper RUN_DIR STDOUT STDERR CWD USER NCGROUPS [CGROUP...] "
                "-- ARGV... (the task's environment on fd 3)\n");
        return 2;
    }
    struct timespec started;
    clock_gettime(CLOCK_REALTIME, &started);
    spawner = getppid();
    run_dir = argv[1];
    const char *slash = strrchr(run_dir, '/');
    snprintf(prefix, sizeof prefix, "%s ", slash ? slash + 1 : run_dir);
    const char *out_path = argv[2], *err_path = argv[3], *cwd = argv[4], *user = argv[5];
    int ncg = atoi(argv[6]);
    if (ncg < 0 || 7 + ncg >= argc || strcmp(argv[7 + ncg], "--") != 0 || 8 + ncg >= argc) {
        fprintf(stderr, "agora-task-wrapper: malformed arguments\n");
        return 2;
    }
    char **cgroups = argv + 7;
    task_cgroups = cgroups;
    task_ncg = ncg;
    char **task_argv = argv + 8 + ncg;
    /* Nothing of the spawner's beyond the environment pipe stays open here for the task's
     * lifetime (the agent, which spawns it, has sockets and pipes of its own). */
    close_fds(4, ~0U);

    /* The spawner's dispositions are not ours: we wait for our child; a closed report pipe
     * must not kill us before the task's end is recorded. */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, ign = {.sa_handler = SIG_IGN};
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGPIPE, &ign, NULL);
    setsid();
    /* Stdin on /dev/null (the spawner leaves it to us). Opened as fd 0 when the spawner had
     * none: then it is in place already. */
    int null = open("/dev/null", O_RDONLY);
    if (null > 0) {
        dup2(null, 0);
        close(null);
    }

    char message[MAX_REPORT];
    char **envp = read_environment();
    if (!envp) {
        snprintf(message, sizeof message, "cannot run '%s': cannot read its environment",
                 task_argv[0]);
        fail(message);
        return 1;
    }
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0], strerror(errno));
        fail(message);
        return 1;
    }
    /* SIGTERM held until the task's pid is known, so none is lost in between. */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &old);
    struct task_start first = {.errfd = pipefd[1], .readfd = pipefd[0], .cgroups = cgroups,
                               .ncg = ncg, .cwd = cwd, .out_path = out_path,
                               .err_path = err_path, .argv = task_argv, .envp = envp};
    first.bad_user = parse_user(user, &first.who); /* here: the task's process allocates nothing */
    int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    pid_t pid = clone_task(&first);
    /* A plain task's process shared this memory to its exec: its change of user reset the
     * memory's dumpable flag, this process's as it was. */
    if (!ns_spec && dumpable >= 0) prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
    close(pipefd[1]);
    if (pid < 0) {
        if (ns_spec) /* the namespaces refused (a limit on their number, a policy) */
            snprintf(message, sizeof message,
                     "cannot set up the task's namespaces (--task-namespaces): %s",
                     strerror(errno));
        else
            snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0],
                     strerror(errno));
        fail(message);
        return 1;
    }
    char failure[64] = {0};
    ssize_t got;
    do {
        got = read(pipefd[0], failure, sizeof failure - 1);
    } while (got < 0 && errno == EINTR);
    close(pipefd[0]);
    if (got > 0) {
        int status, code = 0, index = 0;
        char kind[16] = {0};
        sscanf(failure, "%15s %d %d", kind, &code, &index);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        empty_cgroups(cgroups, ncg);
        if (strcmp(kind, "cgroup") == 0 && index >= 0 && index < ncg)
            snprintf(message, sizeof message,
                     "cannot put the task in its cgroup: [Errno %d] %s: '%s'", code,
                     strerror(code), cgroups[index]);
        else if (strcmp(kind, "ns") == 0)
            snprintf(message, sizeof message,
                     "cannot set up the task's namespaces (--task-namespaces): %s",
                     strerror(code));
        else
            snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0], what(code));
        fail(message);
        return 1;
    }

    task_pgid = pid;
    struct sigaction fwd = {.sa_handler = forward, .sa_flags = SA_RESTART};
    sigaction(SIGTERM, &fwd, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* The pid-reuse guard is the start in ticks; the wall-clock start is for people, and the
     * clock read when main began is it to within the exec (no /proc/stat read for btime). */
    long long ticks = start_ticks();
    double start = started.tv_sec + started.tv_nsec / 1e9;
    snprintf(message, sizeof message, "started %d %d %.6f %lld", pid, getpid(), start, ticks);
    report(message);
    char json[IN_PLACE_MAX];
    snprintf(json, sizeof json,
             "{\"wrapper_pid\": %d, \"wrapper_start\": %.6f, \"wrapper_start_ticks\": %lld, "
             "\"task_pid\": %d}",
             getpid(), start, ticks, pid);
    write_json("wrapper.json", json);

    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = 0;
            break;
        }
    }
    /* In namespaces, the command's own end, which its init sent; none if the init was killed
     * (a SIGKILL from outside ends the whole namespace), and then the init's end is it. */
    if (ns_spec) {
        int raw;
        if (read(status_pipe[0], &raw, sizeof raw) == (ssize_t)sizeof raw) status = raw;
        close(status_pipe[0]);
    }
    /* The command is gone; so must be anything it left running in its group. */
    kill(-pid, SIGKILL);
    long long limit = memory_limit_hit(cgroups, ncg);
    empty_cgroups(cgroups, ncg);
    int n = WIFSIGNALED(status)
                ? snprintf(json, sizeof json, "{\"signal\": %d", WTERMSIG(status))
                : snprintf(json, sizeof json, "{\"exit_code\": %d", WEXITSTATUS(status));
    if (limit >= 0) n += snprintf(json + n, sizeof json - n, ", \"memory_limit_hit\": %lld", limit);
    /* What the command used, all told: the processes this wrapper waited for (the task). */
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        n += snprintf(json + n, sizeof json - n,
                      ", \"cpu_user\": %.6f, \"cpu_system\": %.6f, \"max_rss_kb\": %ld",
                      ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
                      ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, ru.ru_maxrss);
    snprintf(json + n, sizeof json - n, "}");
    write_json("exit.json", json);
    let_go();
    return 0;
}
