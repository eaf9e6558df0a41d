// sroutectl: the admin client. Offline for now: `rules check` and
// `rules fmt` work on rule files without any host or controller.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "rules/parser.h"

namespace {

bool ReadInput(const std::string& path, std::string* out) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    *out = ss.str();
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "sroutectl: cannot read " << path << "\n";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Prints every parse error as FILE:LINE:COL: reason; returns the count.
size_t PrintErrors(const std::string& path, const sroute::ParsedRules& parsed) {
  for (const sroute::ParseError& e : parsed.errors) {
    std::cerr << path << ":" << e.line << ":" << e.column << ": " << e.reason
              << "\n";
  }
  return parsed.errors.size();
}

int Check(const std::vector<std::string>& files) {
  int status = 0;
  for (const std::string& path : files) {
    std::string text;
    if (!ReadInput(path, &text)) {
      status = 2;
      continue;
    }
    sroute::ParsedRules parsed = sroute::ParseRules(text);
    if (PrintErrors(path, parsed) > 0) {
      status = std::max(status, 1);
      continue;
    }
    std::cout << (files.size() > 1 ? path + ": " : "")
              << "OK: " << parsed.rules.size() << " rule"
              << (parsed.rules.size() == 1 ? "" : "s") << "\n";
  }
  return status;
}

int Fmt(const std::string& path) {
  std::string text;
  if (!ReadInput(path, &text)) return 2;
  sroute::ParsedRules parsed = sroute::ParseRules(text);
  if (PrintErrors(path, parsed) > 0) return 1;
  for (const sroute::Rule& r : parsed.rules) {
    std::cout << sroute::FormatRule(r) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sroutectl: manage sroute rules"};
  app.require_subcommand(1);
  CLI::App* rules = app.add_subcommand("rules", "rule files and rule tables");
  rules->require_subcommand(1);

  std::vector<std::string> check_files;
  CLI::App* check = rules->add_subcommand(
      "check", "parse rule files; print OK: N rules or FILE:LINE:COL errors");
  check->add_option("FILE", check_files, "rule files ('-' for stdin)")
      ->required();

  std::string fmt_file;
  CLI::App* fmt =
      rules->add_subcommand("fmt", "print a rule file in canonical form");
  fmt->add_option("FILE", fmt_file, "rule file ('-' for stdin)")->required();

  CLI11_PARSE(app, argc, argv);
  if (check->parsed()) return Check(check_files);
  if (fmt->parsed()) return Fmt(fmt_file);
  return 2;
}
