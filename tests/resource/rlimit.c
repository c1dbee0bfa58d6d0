/*
 * rlimit.c: runs one command under the resource test's limits and says what
 * it took (issue 17).
 *
 *   rlimit MAX_MB CPU_S OUT ERR COMMAND [ARG...]
 *
 * The command's standard output goes to the file OUT, its errors to ERR.
 * The child gets RLIMIT_CPU = CPU_S seconds (the kernel stops it with
 * SIGXCPU beyond) and RLIMIT_AS = 4 * MAX_MB (a safety net: address space,
 * not resident memory, so it is looser). After it ends, its peak resident
 * set (ru_maxrss) must be at most MAX_MB, it must not have died of a signal,
 * and its exit code must be one a model file may cause: 0 to 4 or 6 (5 is an
 * internal error: a bug). Prints "exit=N cpu=S.SS rss=K KB" and exits 0 when
 * all hold, 1 otherwise (with the reason on stderr), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 6)
        return fprintf(stderr, "usage: rlimit MAX_MB CPU_S OUT ERR COMMAND [ARG...]\n"), 2;
    long max_mb = strtol(argv[1], NULL, 10), cpu_s = strtol(argv[2], NULL, 10);
    if (max_mb <= 0 || cpu_s <= 0)
        return fprintf(stderr, "rlimit: MAX_MB and CPU_S must be positive\n"), 2;
    pid_t pid = fork();
    if (pid < 0)
        return fprintf(stderr, "rlimit: fork: %s\n", strerror(errno)), 2;
    if (pid == 0) {
        struct rlimit cpu = {(rlim_t)cpu_s, (rlim_t)cpu_s + 1};
        struct rlimit as = {(rlim_t)max_mb * 4 << 20, (rlim_t)max_mb * 4 << 20};
        if (setrlimit(RLIMIT_CPU, &cpu) != 0 || setrlimit(RLIMIT_AS, &as) != 0 ||
            !freopen(argv[3], "w", stdout) || !freopen(argv[4], "w", stderr))
            _exit(126);
        execvp(argv[5], argv + 5);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return fprintf(stderr, "rlimit: wait4: %s\n", strerror(errno)), 2;
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                 ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    printf("exit=%d cpu=%.2f rss=%ld KB\n", code, cpu, ru.ru_maxrss);
    if (WIFSIGNALED(status))
        return fprintf(stderr, "rlimit: killed by signal %d (%s)\n", WTERMSIG(status),
                       WTERMSIG(status) == SIGXCPU ? "over the CPU limit" : strsignal(WTERMSIG(status))),
               1;
    if (ru.ru_maxrss > max_mb * 1024)
        return fprintf(stderr, "rlimit: %ld KB resident, over %ld MB\n", ru.ru_maxrss, max_mb), 1;
    if (code < 0 || code == 5 || code > 6)
        return fprintf(stderr, "rlimit: exit code %d\n", code), 1;
    return 0;
}
