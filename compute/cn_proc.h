/* cn_proc.h — child processes without a shell: posix_spawn with stdin from
 * /dev/null, stdout and stderr on pipes, every other descriptor of the
 * node closed (a listening socket inherited by a long-lived engine
 * process would outlive the node), default signal dispositions, and a
 * process group of its own (a signal meant for the node's group does not
 * reach an engine in the middle of a container's life). Used for the
 * container engine and iptables. */
#ifndef CN_PROC_H
#define CN_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* Starts argv[0] (a path, or a name looked up in envp's PATH) with envp,
 * in directory cwd (NULL: "/": whatever an engine's helpers leave in their
 * working directory — conmon's "oom" file — stays out of the node's).
 * *out_fd and *err_fd (may be NULL: the output goes to /dev/null) get the
 * read ends of its stdout and stderr, non-blocking and close-on-exec.
 * 0 and *pid, or -errno. */
int cn_proc_spawn(char *const argv[], char *const envp[], const char *cwd, pid_t *pid, int *out_fd,
                  int *err_fd);

/* Runs argv to its end, at most timeout_ms (then it is killed). Its
 * stdout, then its stderr, go into out (NUL-terminated, cut at outlen - 1;
 * may be NULL). Returns its exit status (0..255, 128 + n for a signal),
 * -ETIMEDOUT, or -errno when it could not start. */
int cn_proc_run(char *const argv[], char *const envp[], int timeout_ms, char *out, size_t outlen);

/* The exit status of a waitpid status: the code, or 128 + the signal. */
int cn_proc_status(int wstatus);

/* Finds an executable name in the PATH of envp (or the path itself when
 * it has a '/'), into out. 0 or -ENOENT. */
int cn_proc_which(const char *name, char *const envp[], char *out, size_t outlen);

#endif
