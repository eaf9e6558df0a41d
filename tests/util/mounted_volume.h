// SPDX-License-Identifier: Apache-2.0
// MountedVolume: runs `sroute-fuse MOUNTPOINT -f ARGS...` as a child process
// for a test, waits until the mount is live, and unmounts and reaps it on
// destruction (or Kill() to simulate a crash).
#ifndef SROUTE_TESTS_UTIL_MOUNTED_VOLUME_H_
#define SROUTE_TESTS_UTIL_MOUNTED_VOLUME_H_

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace sroute::testing {

class MountedVolume {
 public:
  // Starts the daemon; ok() tells whether the mount came up within 10 s.
  MountedVolume(const std::string& binary, const std::string& mountpoint,
                std::vector<std::string> args)
      : mountpoint_(mountpoint) {
    struct stat before {};
    stat(mountpoint.c_str(), &before);
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> argv = {binary, mountpoint, "-f"};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(binary.c_str(), cargv.data());
      _exit(127);
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      struct stat now {};
      if (stat(mountpoint.c_str(), &now) == 0 && now.st_dev != before.st_dev) {
        mounted_ = true;
        return;
      }
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;  // exited: the mount failed
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~MountedVolume() { Unmount(); }
  MountedVolume(const MountedVolume&) = delete;
  MountedVolume& operator=(const MountedVolume&) = delete;

  bool ok() const { return mounted_; }
  pid_t pid() const { return pid_; }
  const std::string& path() const { return mountpoint_; }
  std::string operator/(const std::string& rel) const {
    return mountpoint_ + "/" + rel;
  }

  void Unmount() {
    if (mounted_) {
      std::string cmd = "fusermount3 -u -z '" + mountpoint_ + "' 2>/dev/null";
      if (system(cmd.c_str()) != 0) {
        // already gone (killed daemon); the lazy unmount above cleans up
      }
      mounted_ = false;
    }
    Reap(SIGTERM);
  }
  // SIGKILL the daemon, as a crash would.
  void Kill() { Reap(SIGKILL); }

  // Waits up to `timeout` for the daemon to exit by itself (after a signal
  // or an unmount the test caused). Returns its wait status, or -1 if it is
  // still running.
  int WaitExit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;  // a dead daemon's mount is still unmounted by Unmount()
        return status;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  // Gives the daemon a second to end by itself, then `sig` and four more
  // seconds, then SIGKILL (a SIGKILL `sig` is sent at once).
  void Reap(int sig) {
    if (pid_ <= 0) return;
    if (sig == SIGKILL) kill(pid_, SIGKILL);
    if (WaitExit(std::chrono::seconds(1)) != -1) return;
    kill(pid_, sig);
    if (WaitExit(std::chrono::seconds(4)) != -1) return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string mountpoint_;
  pid_t pid_ = -1;
  bool mounted_ = false;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_MOUNTED_VOLUME_H_
