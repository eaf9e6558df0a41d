// SPDX-License-Identifier: Apache-2.0
// A model-based random exerciser of files: a seeded sequence of writes,
// reads, shared-mmap reads and writes, truncates up and down, O_TRUNC
// reopens, close/reopen, every fallocate mode, copy_file_range within and
// across files, and SEEK_DATA / SEEK_HOLE, applied to real files and to an
// in-memory model of their bytes. Every result is checked against the
// model as it happens (bytes read, sizes, seek answers); the whole files
// are compared every `check_every` operations and at the end.
//
// The same seed gives the same sequence of operations: a failure names
// the seed and the operation, and the log of the last operations before it.
//
// Used by the trust tests (tests/integration/trust_test.cc) and by the
// long-run command sroute-exercise (tools/exercise/main.cc).
#ifndef SROUTE_TOOLS_EXERCISE_EXERCISER_H_
#define SROUTE_TOOLS_EXERCISE_EXERCISER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sroute::testing {

struct ExerciseOptions {
  uint64_t seed = 1;
  uint64_t ops = 20000;
  // Files stay about this large (truncates pull them back); IOs are up to
  // `max_io` bytes, so that they cross 64 KiB range boundaries.
  uint64_t max_size = 384 * 1024;
  uint64_t max_io = 80 * 1024;
  // fallocate collapse/insert range may fail with EOPNOTSUPP; the model is
  // then left unchanged. FUSE volumes refuse them always (the kernel sends
  // only allocate, keep-size, punch-hole and zero-range to a FUSE daemon);
  // a storage server refuses them for a file whose bytes live in several
  // places.
  bool shifts_may_be_refused = false;
  bool mmap = true;
  bool copy_file_range = true;
  uint64_t check_every = 1000;
  // Called after every operation with its number (e.g. to compare replicas).
  // Returns an error message, or "" to go on.
  std::function<std::string(uint64_t op)> after_op;
};

struct ExerciseResult {
  bool ok = true;
  uint64_t ops_done = 0;
  std::string error;  // with the seed, the operation and the log tail
  // Operations by kind, and fallocate shifts refused.
  std::vector<std::pair<std::string, uint64_t>> counts;
};

// Runs on `paths` (1 to 4 files; created or emptied first).
ExerciseResult Exercise(const std::vector<std::string>& paths,
                        const ExerciseOptions& options);

// The whole content of `path` (read(2) to its end), e.g. to compare a
// replica with the file; "" if it cannot be opened.
std::string ReadAll(const std::string& path);

}  // namespace sroute::testing

#endif  // SROUTE_TOOLS_EXERCISE_EXERCISER_H_
