// SPDX-License-Identifier: Apache-2.0
// MetricsServer: answers `GET /metrics` over HTTP/1.1 with what a collector
// renders (metrics/exposition.h), for Prometheus to scrape. Any other path
// is 404, any other method 405; keep-alive is honoured. It has one thread
// of its own, so a scrape never waits behind the daemon's IO threads and
// an IO never waits behind a scrape.
//
// A client that sends nothing for 10 s, or a request over 8 KiB, is
// disconnected. There is no authentication: listen on an address only the
// monitoring network reaches (the default of every daemon is not to
// listen at all).
//
// Thread safety: Start and the destructor from one thread; `collect` runs
// on the server's thread, one scrape at a time.
#ifndef SROUTE_METRICS_HTTP_SERVER_H_
#define SROUTE_METRICS_HTTP_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sroute::metrics {

class MetricsServer {
 public:
  // The body of one /metrics answer (Prometheus text format).
  using Collect = std::function<std::string()>;

  // Listens on `address` ("HOST:PORT"; port 0 picks a free one). Errors:
  // InvalidArgument for a bad address, Unavailable when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, Collect collect);
  // Stops listening, closes connections and joins the thread.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const;
  // "HOST:PORT" as listened on.
  std::string address() const;
  // Scrapes answered (200) so far.
  uint64_t scrapes() const;

  struct Impl;

 private:
  explicit MetricsServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// GETs http://ADDRESS/PATH ("HOST:PORT") and returns the body of a 200
// answer; another status is an error with the status line. For tests and
// tools.
absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path = "/metrics");

}  // namespace sroute::metrics

#endif  // SROUTE_METRICS_HTTP_SERVER_H_
