// SPDX-License-Identifier: Apache-2.0
// POSIX-parity scenarios: each one runs a fixed sequence of syscalls beneath a
// directory and returns a transcript that depends only on the file system's
// observable behaviour (results and errno names), never on where the
// directory is, inode numbers, devices, block counts or the current time.
// Running a scenario on a mounted sroute volume and on a plain directory must
// give identical transcripts.
//
// Transcript lines look like
//   open(a, O_CREAT|O_EXCL): ok
//   open(a, O_CREAT|O_EXCL): EEXIST
//   pread(a, 4096@8192): 4096 bytes crc=0x1234abcd
//   stat(a): size=4096 mode=0100644 nlink=1
// A line containing "UNEXPECTED" means the scenario caught an inconsistency
// by itself (data read back differs from what it wrote, a result POSIX or
// Linux mandates did not happen, ...).
#ifndef SROUTE_TESTS_INTEGRATION_POSIX_SCENARIOS_H_
#define SROUTE_TESTS_INTEGRATION_POSIX_SCENARIOS_H_

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace sroute::testing {

struct Scenario {
  // A C identifier (letters, digits, '_'), usable as a test name.
  std::string name;
  // Runs the scenario beneath `root`, an existing empty directory, and
  // returns its transcript: one line per step, each ending in '\n'.
  std::function<std::string(const std::string& root)> run;
};

// Prints the name (for gtest parameter names and failure messages).
void PrintTo(const Scenario& s, std::ostream* os);

// Every scenario, in a fixed order. They run as whoever calls them (the
// trust tests run them as other users too: tests/util/run_as.h).
std::vector<Scenario> PosixScenarios();

// Scenarios of several users on one tree: owners of every kind of node,
// set-group-ID directories, sticky directories, search permission, umask.
// They must run as root; each step of a user runs in a child process that
// is that user (Nobody() and Grouped() of tests/util/run_as.h).
std::vector<Scenario> IdentityScenarios();

// "EEXIST" for EEXIST, ..., "E<num>" for numbers it does not know.
std::string ErrnoName(int err);

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_INTEGRATION_POSIX_SCENARIOS_H_
