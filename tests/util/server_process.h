// SPDX-License-Identifier: Apache-2.0
// ServerProcess: runs `sroute-server ARGS...` as a child process for a test,
// waits until it prints "listening on HOST:PORT", and stops it by its pid
// (SIGTERM on destruction, or Kill() to simulate a crash). Also writes a
// private cluster secret file for tests.
#ifndef SROUTE_TESTS_UTIL_SERVER_PROCESS_H_
#define SROUTE_TESTS_UTIL_SERVER_PROCESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/util/temp_dir.h"

namespace sroute::testing {

// A port on 127.0.0.1 that was free a moment ago (nobody listens on it):
// for servers that must name each other before either listens, and for
// addresses that must not answer.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// Writes `secret` to `path` with mode 0600; returns `path`.
inline std::string WriteSecretFile(
    const std::string& path,
    const std::string& secret = "test-cluster-secret-0123456789") {
  WriteWholeFile(path, secret + "\n");
  chmod(path.c_str(), 0600);
  return path;
}

class ServerProcess {
 public:
  // Waits up to `startup` for the process to say it listens.
  ServerProcess(const std::string& binary, std::vector<std::string> args,
                std::chrono::seconds startup = std::chrono::seconds(15)) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      std::vector<std::string> argv = {binary};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(binary.c_str(), cargv.data());
      _exit(127);
    }
    close(out[1]);
    // The first line is "listening on HOST:PORT".
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + startup;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      const ssize_t n = read(out[0], &c, 1);
      if (n <= 0) break;  // exited before listening
      if (c == '\n') break;
      line.push_back(c);
    }
    close(out[0]);
    const std::string prefix = "listening on ";
    if (line.rfind(prefix, 0) == 0) {
      address_ = line.substr(prefix.size());
      port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
    } else {
      Kill();
    }
  }
  ~ServerProcess() { Stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ok() const { return pid_ > 0 && port_ > 0; }
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // SIGTERM, then SIGKILL if it does not exit within 10 s. Returns the exit
  // status as waitpid gives it (-1 if it was not running).
  int Stop() { return Reap(SIGTERM); }
  void Kill() { Reap(SIGKILL); }
  // Whether the process has exited by itself; then `*status` is its status
  // as waitpid gives it (and the process is reaped).
  bool Exited(int* status) {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }

 private:
  int Reap(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      usleep(10000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  std::string address_;
  int port_ = 0;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_SERVER_PROCESS_H_
