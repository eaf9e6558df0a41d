// SPDX-License-Identifier: Apache-2.0
#include "host/detach.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "util/errno_status.h"
#include "util/log.h"

namespace sroute {

absl::Status Detacher::Detach() {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  const pid_t child = fork();
  if (child < 0) return ErrnoStatus(errno, "fork");
  if (child > 0) {
    close(pipe_fds[1]);
    char byte = 0;
    ssize_t n;
    do {
      n = read(pipe_fds[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) _exit(0);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status)
                                                        : 1);
  }
  close(pipe_fds[0]);
  ready_fd_ = pipe_fds[1];
  // Out of the terminal's session: its hang-up and job-control signals are
  // not the daemon's.
  setsid();
  return absl::OkStatus();
}

void Detacher::Ready() {
  if (ready_fd_ < 0) return;
  // Whatever relative paths the set-up used are resolved by now.
  if (chdir("/") != 0) {
    // Keeps its directory: harmless, only a mount point it pins.
  }
  // Logs go on to the journal when stderr is it (a mount unit, a service);
  // a terminal that may close is left for syslog, which the journal (or a
  // syslog daemon) collects.
  const bool journal = IsJournalStream(getenv("JOURNAL_STREAM"), STDERR_FILENO);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    if (!journal) dup2(null_fd, STDERR_FILENO);
    if (null_fd > STDERR_FILENO) close(null_fd);
  }
  if (!journal) LogToSyslog();
  const char byte = 1;
  ssize_t n;
  do {
    n = write(ready_fd_, &byte, 1);
  } while (n < 0 && errno == EINTR);
  close(ready_fd_);
  ready_fd_ = -1;
}

}  // namespace sroute
