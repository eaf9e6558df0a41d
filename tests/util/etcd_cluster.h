// SPDX-License-Identifier: Apache-2.0
// EtcdCluster: a real etcd cluster (Debian's etcd-server, /usr/bin/etcd) of
// N members on 127.0.0.1 for a test. Each member has its own data
// directory and free ports; the constructor returns once a write goes
// through (ok()). Kill(i) SIGKILLs a member, Restart(i) starts it again on
// the same directory and ports; the destructor kills them all. Elections
// are tuned fast (50 ms heartbeats, 500 ms election timeout) so that tests
// of failures take seconds.
#ifndef SROUTE_TESTS_UTIL_ETCD_CLUSTER_H_
#define SROUTE_TESTS_UTIL_ETCD_CLUSTER_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "controller/etcd_client.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace sroute::testing {

class EtcdCluster {
 public:
  explicit EtcdCluster(int members, std::string binary = "/usr/bin/etcd")
      : binary_(std::move(binary)) {
    for (int i = 0; i < members; ++i) {
      members_.push_back(Member{"m" + std::to_string(i), FreeLoopbackPort(),
                                FreeLoopbackPort(), -1});
    }
    for (size_t i = 0; i < members_.size(); ++i) Spawn(i, "new");
    ok_ = WaitWritable(std::chrono::seconds(30));
  }
  ~EtcdCluster() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(i);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool ok() const { return ok_; }
  size_t size() const { return members_.size(); }
  // "127.0.0.1:P1,127.0.0.1:P2,..." (the controller's --store etcd://...).
  std::string endpoints() const {
    std::string out;
    for (const Member& m : members_) {
      out += (out.empty() ? "" : ",") + ClientAddress(m);
    }
    return out;
  }
  std::vector<std::string> member_endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_) out.push_back(ClientAddress(m));
    return out;
  }
  pid_t pid(size_t i) const { return members_[i].pid; }

  // SIGKILL, and waits for the process to be gone.
  void Kill(size_t i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }
  // Starts member i again on its data directory.
  void Restart(size_t i) { Spawn(i, "existing"); }

  // Whether a write through every member's endpoint list goes through
  // within `timeout`.
  bool WaitWritable(std::chrono::seconds timeout) {
    EtcdClient::Options o;
    o.endpoints = member_endpoints();
    o.timeout = absl::Seconds(1);
    auto client = EtcdClient::Create(o);
    if (!client.ok()) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      etcd::PutRequest put;
      put.set_key("/test/ready");
      put.set_value("1");
      if ((*client)->Put(put).ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::string log(size_t i) const {
    return ReadWholeFile(dir_ / (members_[i].name + ".log"));
  }

 private:
  struct Member {
    std::string name;
    int client_port;
    int peer_port;
    pid_t pid;
  };

  static std::string ClientAddress(const Member& m) {
    return "127.0.0.1:" + std::to_string(m.client_port);
  }

  void Spawn(size_t i, const std::string& state) {
    const Member& self = members_[i];
    std::string initial;
    for (const Member& m : members_) {
      initial += (initial.empty() ? "" : ",") + m.name +
                 "=http://127.0.0.1:" + std::to_string(m.peer_port);
    }
    const std::string client = "http://" + ClientAddress(self);
    const std::string peer =
        "http://127.0.0.1:" + std::to_string(self.peer_port);
    std::vector<std::string> args = {
        binary_,
        "--name=" + self.name,
        "--data-dir=" + (dir_ / self.name),
        "--listen-client-urls=" + client,
        "--advertise-client-urls=" + client,
        "--listen-peer-urls=" + peer,
        "--initial-advertise-peer-urls=" + peer,
        "--initial-cluster=" + initial,
        "--initial-cluster-state=" + state,
        "--initial-cluster-token=sroute-test-" + std::to_string(getpid()),
        "--heartbeat-interval=50",
        "--election-timeout=500",
        "--logger=zap",
        "--log-outputs=stderr"};
    const std::string log_path = (dir_ / (self.name + ".log"));
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd =
          open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    members_[i].pid = pid;
  }

  const std::string binary_;
  TempDir dir_;
  std::vector<Member> members_;
  bool ok_ = false;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_ETCD_CLUSTER_H_
