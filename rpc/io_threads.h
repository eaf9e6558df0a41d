// IoThreads: a Boost.Asio io_context run by a few threads of its own, on
// which RPC connections do their network work.
//
// Thread safety: thread-safe. The destructor stops the context and joins
// the threads; every connection using it must be closed first.
#ifndef SROUTE_RPC_IO_THREADS_H_
#define SROUTE_RPC_IO_THREADS_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace sroute {

class IoThreads {
 public:
  // REQUIRES: threads >= 1. With start=false the threads start only with
  // StartAfterFork (for daemons that fork after setting up).
  explicit IoThreads(int threads, bool start = true);
  ~IoThreads();
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  boost::asio::io_context& context() { return *context_; }
  int size() const { return count_; }

  // Stops running handlers and joins the threads (idempotent): no handler
  // runs after it returns. Work still queued is dropped.
  void Stop();

  // In the child of a fork: tells the context, and starts the threads.
  // REQUIRES: constructed with start=false; no IO was started before.
  void StartAfterFork();

 private:
  void Run();
  const int count_;
  struct Guard;
  std::unique_ptr<boost::asio::io_context> context_;
  std::unique_ptr<Guard> guard_;
  std::vector<std::thread> threads_;
};

}  // namespace sroute

#endif  // SROUTE_RPC_IO_THREADS_H_
