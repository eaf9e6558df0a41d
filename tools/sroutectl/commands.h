// SPDX-License-Identifier: Apache-2.0
// The commands of sroutectl as one table: main builds the command line from
// it (a subcommand per entry, under its group) and runs the entry whose
// subcommand was given. Adding a command is adding an entry.
#ifndef SROUTE_TOOLS_SROUTECTL_COMMANDS_H_
#define SROUTE_TOOLS_SROUTECTL_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/sroutectl/calibrate.h"
#include "tools/sroutectl/target.h"

namespace sroute::ctl {

// What the command line gave: the global flags, and the arguments of the
// command given (each command binds the fields it takes).
struct Args {
  std::string host;                // --host
  std::string controller;          // --controller
  std::string secret_file;         // --secret-file
  std::vector<std::string> items;  // FILE..., RULE..., ID|PATTERN..., --clear
  std::string file;
  std::string owner;
  std::string pattern;
  std::string state;  // on|off
  std::string sswitch;
  std::string name;  // a stage's
  std::string spec;  // stages add NAME=KIND:..., stages set key=value,...
  uint32_t timeout_ms = 10000;
  uint64_t after = 0;         // traces --after
  int64_t threshold_ms = -1;  // slow --threshold-ms
  bool clear = false;         // slow --clear
  int last = 20;              // gc status --last
  bool json = false;
  bool deep = false;  // rules check --deep
  // rules check offline: a host's configuration (HostConfig), and its
  // endpoints and stages named on the command line.
  std::string config;
  std::vector<std::string> endpoints;
  std::vector<std::string> stages;
  bool force = false;  // rules add|load --force
  // qos register
  std::string tenant;
  std::string qos_class = "lc";
  uint32_t iops = 0;
  uint32_t read_percent = 100;
  uint32_t p95_us = 0;
  std::vector<std::string> on;
  CalibrateOptions calibrate;  // qos calibrate
  struct {                     // profile measure|model|set
    std::vector<uint32_t> write_percents;
    uint32_t step_percent = 0;  // 0: the sweep's default
    uint32_t step_ms = 0;
    uint32_t warmup_ms = 0;
    uint32_t depth = 0;
    uint32_t size_mib = 0;
    std::string save;
    bool watch = false;
    uint32_t threshold_percent = 0;
    uint32_t window_ms = 0;
    uint32_t max_baseline_percent = 0;
    double dilation = 1;
  } profile;
};

struct Command {
  // The subcommand's words, e.g. "rules ls". A group ("rules") comes before
  // its commands, and has neither setup nor run.
  const char* path;
  const char* help;
  // Adds the command's arguments and flags, bound to fields of `args`.
  void (*setup)(CLI::App& command, Args& args) = nullptr;
  // Runs the command against `target` (the host or controller the global
  // flags name; offline commands leave it alone); returns the exit code.
  int (*run)(const Args& args, ControlTarget& target) = nullptr;
};

// Every command, in the order `sroutectl --help` lists them.
const std::vector<Command>& Commands();

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_COMMANDS_H_
