// SPDX-License-Identifier: Apache-2.0
// sroute-exercise: runs the model-based file exerciser (exerciser.h) on
// files, for long runs and for replaying a failure by its seed.
//
//   sroute-exercise [--seed N] [--ops N] [--shifts-may-be-refused]
//                   [--no-mmap] [--no-copy-file-range] FILE...
//
// Prints the count of each operation and exits 0, or prints the failure
// (seed, operation, last operations) and exits 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/exercise/exerciser.h"

int main(int argc, char** argv) {
  sroute::testing::ExerciseOptions o;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> unsigned long long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::strtoull(argv[++i], nullptr, 10);
    };
    if (a == "--seed") {
      o.seed = value();
    } else if (a == "--ops") {
      o.ops = value();
    } else if (a == "--shifts-may-be-refused") {
      o.shifts_may_be_refused = true;
    } else if (a == "--no-mmap") {
      o.mmap = false;
    } else if (a == "--no-copy-file-range") {
      o.copy_file_range = false;
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || files.size() > 4) {
    std::fprintf(stderr,
                 "usage: sroute-exercise [--seed N] [--ops N] "
                 "[--shifts-may-be-refused] [--no-mmap] "
                 "[--no-copy-file-range] FILE... (1 to 4 files)\n");
    return 2;
  }
  const auto r = sroute::testing::Exercise(files, o);
  if (!r.ok) {
    std::fprintf(stderr, "FAILED after %llu operations: %s\n",
                 static_cast<unsigned long long>(r.ops_done), r.error.c_str());
    return 1;
  }
  std::printf("ok: %llu operations, seed %llu\n",
              static_cast<unsigned long long>(r.ops_done),
              static_cast<unsigned long long>(o.seed));
  for (const auto& [kind, n] : r.counts) {
    std::printf("  %-24s %llu\n", kind.c_str(),
                static_cast<unsigned long long>(n));
  }
  return 0;
}
