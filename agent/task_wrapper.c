/* agora-task-wrapper: one task's wrapper, in C (the launcher's fast path; agent/native_wrapper.py
 * builds it, agent/executor.py's Python wrapper is the reference and the fallback).
 *
 * It does what the Python wrapper does, without a forked Python process per task (about 3 ms
 * of CPU a task, most of it copy-on-write faults of the launcher's heap):
 *
 *   agora-task-wrapper RUN_DIR STDOUT STDERR CWD USER NCGROUPS [CGROUP...] -- ARGV...
 *     USER      "-" (the wrapper's own), or "UID:GID:G1,G2,..." (groups may be empty)
 *     the environment is the task's; stdout is the launcher's report pipe; the report lines
 *     are prefixed with the run id (RUN_DIR's last component).
 *
 * The task is forked, puts itself in its cgroups, its own process group and user, and execs
 * the command with stdin on /dev/null and stdout/stderr appended to the sandbox files; a
 * close-on-exec pipe carries any failure before the exec back here. The wrapper itself never
 * enters the task's cgroups (the Python wrapper steps in and out only to spare Python a fork).
 * It reports "started TASK_PID WRAPPER_PID WRAPPER_START START_TICKS" (or "error MESSAGE") in
 * one write shorter than PIPE_BUF, lets go of the pipe, writes wrapper.json, forwards SIGTERM
 * to the task's group, waits, kills what the task left in its group and cgroups, and writes
 * exit.json: {"exit_code": N} | {"signal": N} | {"error": "..."}, with "memory_limit_hit".
 * Both JSON files are written in place over the placeholders the agent reserved (a full disk
 * does not stop that), else through a temporary file and a rename.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPORT 3000
#define IN_PLACE_MAX 4096

static const char *run_dir;
static char prefix[512];
static volatile pid_t task_pgid;

static void forward(int signum) {
    if (task_pgid > 0) kill(-task_pgid, signum);
}

/* One report line on the launcher's pipe (one write), then the pipe is let go. */
static void report(const char *line) {
    char buf[MAX_REPORT + 600];
    int n = snprintf(buf, sizeof buf, "%s%s", prefix, line);
    if (n < 0) n = 0;
    if (n > MAX_REPORT) n = MAX_REPORT;
    for (int i = 0; i < n; i++)
        if (buf[i] == '\n') buf[i] = ' ';
    buf[n++] = '\n';
    ssize_t ignored = write(1, buf, n);
    (void)ignored;
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

static void fail(const char *message) {
    char escaped[2 * MAX_REPORT], json[2 * MAX_REPORT + 32];
    json_escape(escaped, sizeof escaped, message);
    snprintf(json, sizeof json, "{\"error\": \"%s\"}", escaped);
    write_json("exit.json", json);
    char line[MAX_REPORT];
    snprintf(line, sizeof line, "error %s", message);
    report(line);
}

static int read_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

/* Start time of this process, in clock ticks since boot (field 22 of /proc/self/stat). */
static long long start_ticks(void) {
    char buf[1024];
    if (read_file("/proc/self/stat", buf, sizeof buf) < 0) return -1;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    p += 2; /* field 3, the state */
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    return p ? atoll(p) : -1;
}

static double boot_time(void) {
    static char buf[16384];
    if (read_file("/proc/stat", buf, sizeof buf) < 0) return 0;
    char *p = strstr(buf, "\nbtime ");
    return p ? atof(p + 7) : 0;
}

/* The memory limit if the OOM killer acted in these cgroups (v2, then v1), else -1. */
static long long memory_limit_hit(char **cgroups, int n) {
    static const char *files[][2] = {{"memory.events", "memory.max"},
                                     {"memory.oom_control", "memory.limit_in_bytes"}};
    char path[4096], buf[4096];
    for (int i = 0; i < n; i++) {
        for (int f = 0; f < 2; f++) {
            snprintf(path, sizeof path, "%s/%s", cgroups[i], files[f][0]);
            if (read_file(path, buf, sizeof buf) < 0) continue;
            char *p = strstr(buf, "oom_kill ");
            if (!p || (p != buf && p[-1] != '\n') || atoll(p + 9) <= 0) continue;
            snprintf(path, sizeof path, "%s/%s", cgroups[i], files[f][1]);
            if (read_file(path, buf, sizeof buf) < 0) return 0;
            return atoll(buf); /* "max" reads as 0, as in the Python wrapper */
        }
    }
    return -1;
}

/* Kills what escaped the process group but not the cgroups, then removes them. */
static void empty_cgroups(char **cgroups, int n) {
    char path[4096], buf[65536];
    for (int round = 0; round < 50; round++) {
        int found = 0;
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[i]);
            if (read_file(path, buf, sizeof buf) < 0) continue;
            for (char *p = strtok(buf, " \n"); p; p = strtok(NULL, " \n")) {
                pid_t pid = (pid_t)atoi(p);
                if (pid > 0 && pid != getpid()) {
                    kill(pid, SIGKILL);
                    found = 1;
                }
            }
        }
        if (!found) break;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < n; i++) rmdir(cgroups[i]);
}

/* The Python wrapper's words for a failed start (agent/executor.py). */
static const char *what(int err) {
    if (err == ENOENT) return "command not found";
    if (err == EACCES || err == EPERM) return "permission denied";
    return strerror(err);
}

/* In the forked child: never returns. Failures go to `errfd` as "KIND ERRNO". */
static void start_task(int errfd, char **cgroups, int ncg, const char *user, const char *cwd,
                       int out, int err, char **argv) {
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
        char path[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", cgroups[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, msg, strlen(msg)) < 0) {
            dprintf(errfd, "cgroup %d", errno);
            _exit(127);
        }
        close(fd);
    }
    setpgid(0, 0);
    /* Before giving up root: the sandbox's parents need not be open to the task's user. */
    if (chdir(cwd) < 0) {
        dprintf(errfd, "exec %d", errno);
        _exit(127);
    }
    if (strcmp(user, "-") != 0) {
        unsigned uid, gid;
        int used = 0;
        if (sscanf(user, "%u:%u:%n", &uid, &gid, &used) < 2) {
            dprintf(errfd, "exec %d", EINVAL);
            _exit(127);
        }
        gid_t groups[256];
        int ngroups = 0;
        for (char *p = (char *)user + used; *p && ngroups < 256;) {
            groups[ngroups++] = (gid_t)strtoul(p, &p, 10);
            if (*p == ',') p++;
            else break;
        }
        if (setgroups(ngroups, groups) < 0 || setregid(gid, gid) < 0 || setreuid(uid, uid) < 0) {
            dprintf(errfd, "exec %d", errno);
            _exit(127);
        }
    }
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
        dprintf(errfd, "exec %d", errno);
        _exit(127);
    }
    /* Nothing else of the wrapper's stays open in the task (the error pipe closes on exec). */
    for (int fd = 3; fd < 1024; fd++)
        if (fd != errfd) close(fd);
    execvp(argv[0], argv);
    dprintf(errfd, "exec %d", errno);
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr,
                "usage: agora-task-wrapper RUN_DIR STDOUT STDERR CWD USER NCGROUPS [CGROUP...] "
                "-- ARGV...\n");
        return 2;
    }
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
    char **task_argv = argv + 8 + ncg;

    /* The launcher's dispositions are not ours: we wait for our child. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGCHLD, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    setsid();
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, 0);
        close(null);
    }

    char message[MAX_REPORT];
    int out = open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    int err = out < 0 ? -1 : open(err_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (out < 0 || err < 0) {
        snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0], what(errno));
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
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        start_task(pipefd[1], cgroups, ncg, user, cwd, out, err, task_argv);
    }
    close(pipefd[1]);
    close(out);
    close(err);
    if (pid < 0) {
        snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0], strerror(errno));
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
        int status, code = 0;
        char kind[16] = {0};
        sscanf(failure, "%15s %d", kind, &code);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        empty_cgroups(cgroups, ncg);
        if (strcmp(kind, "cgroup") == 0)
            snprintf(message, sizeof message, "cannot put the task in its cgroup: %s",
                     strerror(code));
        else
            snprintf(message, sizeof message, "cannot run '%s': %s", task_argv[0], what(code));
        fail(message);
        return 1;
    }

    task_pgid = pid;
    struct sigaction fwd = {.sa_handler = forward};
    sigaction(SIGTERM, &fwd, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);

    long long ticks = start_ticks();
    double start = boot_time() + (double)ticks / (double)sysconf(_SC_CLK_TCK);
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
    /* The command is gone; so must be anything it left running in its group. */
    kill(-pid, SIGKILL);
    long long limit = memory_limit_hit(cgroups, ncg); /* before the cgroups are removed */
    empty_cgroups(cgroups, ncg);
    int n = WIFSIGNALED(status)
                ? snprintf(json, sizeof json, "{\"signal\": %d", WTERMSIG(status))
                : snprintf(json, sizeof json, "{\"exit_code\": %d", WEXITSTATUS(status));
    if (limit >= 0) n += snprintf(json + n, sizeof json - n, ", \"memory_limit_hit\": %lld", limit);
    snprintf(json + n, sizeof json - n, "}");
    write_json("exit.json", json);
    return 0;
}
