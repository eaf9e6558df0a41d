// SPDX-License-Identifier: Apache-2.0
// RunAs: runs a function in a child process that acts as another user (its
// uid, gid and supplementary groups set for real, as setpriv would), and
// returns the string the function returned; RunCommandAs: a shell command as
// another user. For tests that must see what an ordinary user sees: the
// daemons run as root, their callers do not.
#ifndef SROUTE_TESTS_UTIL_RUN_AS_H_
#define SROUTE_TESTS_UTIL_RUN_AS_H_

#include <grp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <locale>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sroute::testing {

struct User {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
  mode_t umask = 022;
};

// nobody:nogroup, no other groups.
inline User Nobody() { return User{65534, 65534, {}, 022}; }
// A user with two supplementary groups.
inline User Grouped() { return User{60000, 60000, {60001, 60002}, 022}; }

// In a child: its groups, gid and uid those of `user` (async-signal-safe
// calls only). False if the kernel refused one.
inline bool BecomeUser(const User& user) {
  return setgroups(user.groups.size(), user.groups.data()) == 0 &&
         setresgid(user.gid, user.gid, user.gid) == 0 &&
         setresuid(user.uid, user.uid, user.uid) == 0;
}

// Everything readable from `fd` until its end; closes it.
inline std::string ReadToEnd(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// Runs fn() as `user` in a child; returns its result, or "<child failed: ...>"
// when the child could not switch or died.
inline std::string RunAs(const User& user,
                         const std::function<std::string()>& fn) {
  int p[2];
  if (pipe(p) != 0) return "<child failed: pipe>";
  // The C++ locale's one-time set-up done here, not in the child (fn's
  // streams need it): another thread in the middle of it at the fork would
  // leave the child waiting on its pthread_once for good.
  (void)std::locale();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child keeps only stdin, stdout, stderr and its pipe: a pipe that
    // another thread of the test had open at the fork (popen's) must not
    // stay open here, or its reader would wait for its end as long as fn
    // runs. fn opens what it uses.
    if (p[1] != 3) dup2(p[1], 3);
    p[1] = 3;
    close_range(4, ~0U, 0);
    std::string out;
    if (!BecomeUser(user)) {
      out = "<child failed: cannot become the user>";
    } else {
      umask(user.umask);
      out = fn();
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(p[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(p[1]);
  std::string out = ReadToEnd(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    out += "<child failed: status " + std::to_string(status) + ">";
  }
  return out;
}

// Runs fn() as `user` on a thread of its own, whose credentials alone change:
// raw setgroups/setresgid/setresuid calls (the kernel keeps credentials per
// thread; glibc's wrappers would change every thread's). No fork, so no lock
// another thread held at a fork (an allocator's, under ASan, where clang 14
// has no fork handlers) can leave fn waiting for good, as it did an SQLite
// session beside a thread running sroutectl. The umask is the process's and
// stays; POSIX record locks are the process's too, so fn must not share
// files with locks another thread of the test holds.
inline std::string RunAsThread(const User& user,
                               const std::function<std::string()>& fn) {
  std::string out;
  std::thread t([&] {
    if (syscall(SYS_setgroups, user.groups.size(), user.groups.data()) != 0 ||
        syscall(SYS_setresgid, user.gid, user.gid, user.gid) != 0 ||
        syscall(SYS_setresuid, user.uid, user.uid, user.uid) != 0) {
      out = "<thread failed: cannot become the user>";
      return;
    }
    out = fn();
  });
  t.join();
  return out;
}

// Runs the shell command `cmd` as `user` (stdout and stderr together);
// returns its exit code (-1 if it did not exit normally) and its output.
// The child only switches user and execs: unlike popen inside RunAs, it takes
// no lock another thread of the test may have held at the fork (popen's list
// lock, held by a thread running RunCommand, left that child waiting for
// good).
inline std::pair<int, std::string> RunCommandAs(const User& user,
                                                const std::string& cmd) {
  int p[2];
  if (pipe(p) != 0) return {-1, "<child failed: pipe>"};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close_range(3, ~0U, 0);
    if (!BecomeUser(user)) {
      _exit(126);
    }
    umask(user.umask);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  close(p[1]);
  std::string out = ReadToEnd(p[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return {-1, out};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_RUN_AS_H_
