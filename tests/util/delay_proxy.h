// SPDX-License-Identifier: Apache-2.0
// DelayProxy: a TCP relay on 127.0.0.1 that holds every byte going to the
// target for a fixed delay (replies pass at once), like a slow network
// link in one direction. For tests where `tc netem` is not available.
// Cut(true) is a network partition: every relayed connection closes and
// new ones are closed at once, until Cut(false).
//
// Thread safety: construct and destroy on one thread; it runs threads of
// its own.
#ifndef SROUTE_TESTS_UTIL_DELAY_PROXY_H_
#define SROUTE_TESTS_UTIL_DELAY_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sroute::testing {

class DelayProxy {
 public:
  DelayProxy(uint16_t target_port, std::chrono::microseconds delay)
      : target_port_(target_port), delay_(delay) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(listen_fd_, 16);
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { Accept(); });
  }
  ~DelayProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    accept_.join();
    Cut(true);
  }
  void Cut(bool cut) {
    std::lock_guard<std::mutex> l(links_mu_);
    cut_ = cut;
    if (!cut) return;
    for (auto& link : links_) link->Stop();
    links_.clear();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  // One relayed connection: client -> target delayed, target -> client not.
  class Link {
   public:
    Link(int client, int target, std::chrono::microseconds delay)
        : client_(client), target_(target), delay_(delay) {
      to_target_reader_ = std::thread([this] { ReadDelayed(); });
      to_target_writer_ = std::thread([this] { WriteDelayed(); });
      to_client_ = std::thread([this] { Pump(target_, client_); });
    }
    void Stop() {
      shutdown(client_, SHUT_RDWR);
      shutdown(target_, SHUT_RDWR);
      {
        std::lock_guard<std::mutex> l(mu_);
        done_ = true;
      }
      cv_.notify_all();
      to_target_reader_.join();
      to_target_writer_.join();
      to_client_.join();
      close(client_);
      close(target_);
    }

   private:
    using Clock = std::chrono::steady_clock;
    void ReadDelayed() {
      std::vector<char> buf(1 << 16);
      for (;;) {
        const ssize_t n = read(client_, buf.data(), buf.size());
        std::lock_guard<std::mutex> l(mu_);
        if (n <= 0) {
          done_ = true;
          cv_.notify_all();
          return;
        }
        queue_.push_back({Clock::now() + delay_, std::string(buf.data(), n)});
        cv_.notify_all();
      }
    }
    void WriteDelayed() {
      for (;;) {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return done_ || !queue_.empty(); });
        if (queue_.empty()) {
          shutdown(target_, SHUT_WR);
          return;
        }
        auto [when, data] = std::move(queue_.front());
        queue_.pop_front();
        l.unlock();
        std::this_thread::sleep_until(when);
        if (!WriteAll(target_, data)) return;
      }
    }
    static void Pump(int from, int to) {
      std::vector<char> buf(1 << 16);
      for (;;) {
        const ssize_t n = read(from, buf.data(), buf.size());
        if (n <= 0 || !WriteAll(to, std::string(buf.data(), n))) break;
      }
      shutdown(to, SHUT_WR);
    }
    static bool WriteAll(int fd, const std::string& data) {
      size_t off = 0;
      while (off < data.size()) {
        // MSG_NOSIGNAL: a peer gone (a cut link, a stopped controller)
        // is an error here, not a SIGPIPE that kills the test.
        const ssize_t n =
            send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return false;
        off += n;
      }
      return true;
    }
    const int client_, target_;
    const std::chrono::microseconds delay_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::pair<Clock::time_point, std::string>> queue_;
    bool done_ = false;
    std::thread to_target_reader_, to_target_writer_, to_client_;
  };

  void Accept() {
    while (!stop_) {
      const int c = accept(listen_fd_, nullptr, nullptr);
      if (c < 0) return;
      {
        std::lock_guard<std::mutex> l(links_mu_);
        if (cut_) {
          close(c);
          continue;
        }
      }
      const int t = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(target_port_);
      if (connect(t, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(c);
        close(t);
        continue;
      }
      const int one = 1;
      setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> l(links_mu_);
      links_.push_back(std::make_unique<Link>(c, t, delay_));
    }
  }

  const uint16_t target_port_;
  const std::chrono::microseconds delay_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_;
  std::mutex links_mu_;
  bool cut_ = false;                          // guarded by links_mu_
  std::vector<std::unique_ptr<Link>> links_;  // guarded by links_mu_
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_DELAY_PROXY_H_
