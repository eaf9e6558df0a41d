// SPDX-License-Identifier: Apache-2.0
// sroutectl: the admin client. `rules check` and `rules fmt` work on rule
// files offline; with `--host unix:PATH` (a FUSE host's control socket) or
// `--host HOST:PORT --secret-file F` (a storage server) it talks to one
// host's control port: rules ls/add/rm/load, stats, quiesce, drain, and a
// server's delegate-rule records. With `--controller ADDR --secret-file F`
// it talks to sroute-controller instead: hosts, the managed rules of every
// sSwitch (changed in consistent updates), stats, quiesce and drain; then
// `--host` names an sSwitch registered at the controller.
//
// Exit codes: 0 done, 1 refused or bad input, 2 the host or controller
// could not be reached.
//
// Layout: commands.cc holds the table of commands, each written once
// against ControlTarget (target.h), which host_target.cc implements for a
// host and controller_target.cc for the controller; format.cc the shared
// column output, json_output.cc the --json output (one protobuf message a
// command). This file builds the command line from the table.
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/sroutectl/commands.h"
#include "tools/sroutectl/target.h"

namespace {

// The words a command takes next: its subcommands and its flags.
std::string Words(const CLI::App& app) {
  std::string out;
  for (const CLI::App* sub : app.get_subcommands({})) {
    out += (out.empty() ? "" : " ") + sub->get_name();
  }
  for (const CLI::Option* opt : app.get_options({})) {
    for (const std::string& name : opt->get_lnames()) {
      out += (out.empty() ? "--" : " --") + name;
    }
  }
  return out;
}

void CaseArms(const CLI::App& app, const std::string& path) {
  std::cout << "    \"" << path << "\") words=\"" << Words(app) << "\" ;;\n";
  for (const CLI::App* sub : app.get_subcommands({})) {
    CaseArms(*sub,
             path.empty() ? sub->get_name() : path + " " + sub->get_name());
  }
}

// `sroutectl completion bash`: a bash completion script made from the
// command line itself (so from the command table): installed as
// share/bash-completion/completions/sroutectl.
void PrintBashCompletion(const CLI::App& app) {
  std::cout << "# bash completion for sroutectl (sroutectl completion bash)\n"
               "_sroutectl() {\n"
               "  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" words i w\n"
               "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
               "    w=${COMP_WORDS[i]}\n"
               "    case $w in\n"
               "      --host|--controller|--secret-file) ((i++)) ;;\n"
               "      -*) ;;\n"
               "      *) path=\"${path:+$path }$w\" ;;\n"
               "    esac\n"
               "  done\n"
               "  case $path in\n";
  CaseArms(app, "");
  std::cout << "    *) words=\"\" ;;\n"
               "  esac\n"
               "  mapfile -t COMPREPLY < <(compgen -W \"$words\" -- \"$cur\")\n"
               "}\n"
               "complete -o default -F _sroutectl sroutectl\n";
}

}  // namespace

int main(int argc, char** argv) {
  using sroute::ctl::Args;
  using sroute::ctl::Command;
  CLI::App app{"sroutectl: manage sroute rules"};
  app.set_version_flag("--version", std::string("sroutectl ") + SROUTE_VERSION);
  app.require_subcommand(1);
  Args args;
  app.add_option("--host", args.host,
                 "the host to control: unix:PATH (a FUSE host's control "
                 "socket) or HOST:PORT (a storage server); with --controller, "
                 "an sSwitch registered at the controller");
  app.add_option("--controller", args.controller,
                 "work through the controller at HOST:PORT (or several, "
                 "comma-separated, sharing a store: the leader answers)");
  app.add_option("--secret-file", args.secret_file,
                 "the cluster secret, for storage servers and the controller");
  app.fallthrough();

  // A subcommand per entry, under the group its path names.
  std::map<std::string, CLI::App*> groups = {{"", &app}};
  std::map<const Command*, CLI::App*> commands;
  for (const Command& c : sroute::ctl::Commands()) {
    const std::string path = c.path;
    const size_t space = path.rfind(' ');
    CLI::App* group =
        groups.at(space == std::string::npos ? "" : path.substr(0, space));
    CLI::App* sub = group->add_subcommand(path.substr(space + 1), c.help);
    if (c.run == nullptr) {
      sub->require_subcommand(1);
      groups[path] = sub;
      continue;
    }
    if (c.setup != nullptr) c.setup(*sub, args);
    commands[&c] = sub;
  }
  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "print a shell completion script (bash)");
  completion->add_option("SHELL", shell, "bash")
      ->required()
      ->check(CLI::IsMember({"bash"}));
  CLI11_PARSE(app, argc, argv);
  if (completion->parsed()) {
    PrintBashCompletion(app);
    return 0;
  }

  for (const auto& [command, sub] : commands) {
    if (!sub->parsed()) continue;
    const std::unique_ptr<sroute::ctl::ControlTarget> target =
        args.controller.empty()
            ? sroute::ctl::MakeHostTarget(args.host, args.secret_file)
            : sroute::ctl::MakeControllerTarget(args.controller,
                                                args.secret_file, args.host);
    return command->run(args, *target);
  }
  return 2;
}
