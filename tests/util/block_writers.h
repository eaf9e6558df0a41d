// SPDX-License-Identifier: Apache-2.0
// BlockWriters: writers for tests of updates under load. Writer w appends
// 4 KiB blocks to DIR/f<w> (block i filled with 'a' + (i + w) % 26) until
// stopped, counting the blocks acknowledged; a failed write is a test
// failure and stops that writer. Verify then checks that every
// acknowledged block is in the files where they are stored (a server's
// directory, say): nothing acknowledged was lost or misplaced.
#ifndef SROUTE_TESTS_UTIL_BLOCK_WRITERS_H_
#define SROUTE_TESTS_UTIL_BLOCK_WRITERS_H_

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace sroute::testing {

class BlockWriters {
 public:
  static constexpr size_t kBlock = 4096;

  // Creates the n files (empty) in `dir` and starts the writers; each
  // pauses `pause` after every block.
  BlockWriters(const std::string& dir, int n,
               std::chrono::microseconds pause = std::chrono::microseconds(0))
      : acked_(n) {
    for (int w = 0; w < n; ++w) WriteWholeFile(Path(dir, w), "");
    for (int w = 0; w < n; ++w) {
      threads_.emplace_back([this, w, pause, path = Path(dir, w)] {
        const int fd = open(path.c_str(), O_WRONLY);
        if (fd < 0) {
          ADD_FAILURE() << path << ": " << strerror(errno);
          ++errors_;
          return;
        }
        for (int i = 0; !stop_; ++i) {
          const std::string block(kBlock, Fill(w, i));
          if (pwrite(fd, block.data(), kBlock, i * off_t{kBlock}) !=
              static_cast<ssize_t>(kBlock)) {
            ADD_FAILURE() << "writer " << w << " block " << i << ": "
                          << strerror(errno);
            ++errors_;
            break;
          }
          acked_[w] = i + 1;
          if (pause.count() > 0) std::this_thread::sleep_for(pause);
        }
        close(fd);
      });
    }
  }
  ~BlockWriters() { Stop(); }
  BlockWriters(const BlockWriters&) = delete;
  BlockWriters& operator=(const BlockWriters&) = delete;

  // Stops and joins the writers (idempotent).
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int acked(int w) const { return acked_[w]; }
  int errors() const { return errors_; }
  int size() const { return static_cast<int>(acked_.size()); }

  // "" if every acknowledged block is in stored_dir/f<w>, else the first
  // block that is not.
  std::string Verify(const std::string& stored_dir) const {
    for (int w = 0; w < size(); ++w) {
      const std::string data = ReadWholeFile(Path(stored_dir, w));
      const size_t want = acked_[w] * kBlock;
      if (data.size() < want) {
        return "writer " + std::to_string(w) + ": " +
               std::to_string(data.size()) + " bytes stored, " +
               std::to_string(want) + " acknowledged";
      }
      for (int i = 0; i < acked_[w]; ++i) {
        for (size_t b = 0; b < kBlock; ++b) {
          const char got = data[i * kBlock + b];
          if (got != Fill(w, i)) {
            return "writer " + std::to_string(w) + " block " +
                   std::to_string(i) + " is not as written: byte " +
                   std::to_string(b) + " is " +
                   std::to_string(static_cast<unsigned char>(got)) + ", not " +
                   std::string(1, Fill(w, i)) + " (" +
                   std::to_string(acked_[w]) + " blocks acknowledged)";
          }
        }
      }
    }
    return "";
  }

 private:
  static std::string Path(const std::string& dir, int w) {
    return dir + "/f" + std::to_string(w);
  }
  static char Fill(int w, int i) {
    return static_cast<char>('a' + (i + w) % 26);
  }

  std::vector<std::atomic<int>> acked_;
  std::atomic<int> errors_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_BLOCK_WRITERS_H_
