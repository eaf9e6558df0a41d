// SPDX-License-Identifier: Apache-2.0
// sroute-embed-demo: routes IO through an sSwitch from plain C++, with no
// FUSE mount and no controller. Two directories act as endpoints S1 and S2;
// the rules (examples/rules/demo.rules, or the embedded copy) move IO
// between them, and the demo prints where every byte landed.
//
//   sroute-embed-demo [--dir DIR] [--rules FILE]
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "embed/embedded_host.h"
#include "rules/parser.h"

namespace {

constexpr char kDemoRules[] = R"(# embedded copy of examples/rules/demo.rules
<*, *, //S1/X>              -> <IO, //S2/Y>
<*, r, //S1/big[0:512K]>    -> <IO, //S2/big>
<*, w|c, //S1/vm/*>         -> <IO, //S2/vm/*>
<*, w, //S1/log>            -> <IO, //S1/log>, <IO, //S2/log>
@10 <alice, w, //S1/vhd>    -> track_writes(); <IO, //S2/vhd.tmp>
)";

std::span<const char> Bytes(const std::string& s) {
  return {s.data(), s.size()};
}

void Touch(const std::filesystem::path& p, const std::string& content = "") {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
}

std::string Show(const std::filesystem::path& p) {
  if (!std::filesystem::exists(p)) return "(absent)";
  return std::to_string(std::filesystem::file_size(p)) + " bytes";
}

int Fail(const absl::Status& s) {
  std::cerr << "sroute-embed-demo: " << s << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, rules_file;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--rules") && i + 1 < argc) {
      rules_file = argv[++i];
    } else {
      std::cerr << "usage: sroute-embed-demo [--dir DIR] [--rules FILE]\n";
      return 2;
    }
  }
  if (dir.empty()) {
    char tmpl[] = "/tmp/sroute-demo-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Fail(absl::InternalError("mkdtemp"));
    dir = tmpl;
  }
  const std::filesystem::path s1 = std::filesystem::path(dir) / "S1";
  const std::filesystem::path s2 = std::filesystem::path(dir) / "S2";
  std::filesystem::create_directories(s1);
  std::filesystem::create_directories(s2);
  // Files the demo writes; endpoints do not create files on write. A file
  // whose writes go elsewhere keeps its home on S1 (its size grows there).
  for (const char* f : {"X", "big", "log", "vhd", "vm/disk0"}) Touch(s1 / f);
  for (const char* f : {"Y", "big", "log", "vhd.tmp", "vm/disk0"})
    Touch(s2 / f);
  Touch(s2 / "big", std::string(512 * 1024, 'B'));
  Touch(s1 / "big", std::string(1024 * 1024, 'A'));

  sroute::EmbeddedHost host("demo");
  if (auto s = host.AddLocalEndpoint("S1", s1.string()); !s.ok())
    return Fail(s);
  if (auto s = host.AddLocalEndpoint("S2", s2.string()); !s.ok())
    return Fail(s);
  absl::Status loaded =
      rules_file.empty() ? host.LoadRules(kDemoRules, "<embedded demo rules>")
                         : host.LoadRulesFile(rules_file);
  if (!loaded.ok()) return Fail(loaded);

  std::cout << "endpoints: S1=" << s1.string() << " S2=" << s2.string() << "\n"
            << "rules:\n";
  for (const auto& r : host.sswitch().ListRules()) {
    std::cout << "  " << sroute::FormatRuleInfo(r) << "\n";
  }

  auto must = [](auto result) {
    if (!result.ok()) {
      std::cerr << "IO failed: " << result.status() << "\n";
      std::exit(1);
    }
    return *result;
  };
  must(host.Write("bob", "//S1/X", 0, Bytes("endpoint routing\n")));
  must(host.Write("bob", "//S1/vm/disk0", 0, Bytes("prefix routing\n")));
  must(host.Write("bob", "//S1/log", 0, Bytes("scattered to both\n")));
  must(host.Write("alice", "//S1/vhd", 4096, Bytes("offloaded write\n")));
  std::string head(16, '\0');
  must(host.Read("bob", "//S1/big", 524288 - 8, std::span<char>(head)));
  std::string tracked(16, '\0');
  must(host.Read("alice", "//S1/vhd", 4096, std::span<char>(tracked)));

  std::cout << "\nafter the demo IO:\n"
            << "  write //S1/X          -> S2/Y: " << Show(s2 / "Y")
            << ", S1/X: " << Show(s1 / "X") << "\n"
            << "  write //S1/vm/disk0   -> S2/vm/disk0: "
            << Show(s2 / "vm/disk0") << "\n"
            << "  write //S1/log        -> S1/log: " << Show(s1 / "log")
            << ", S2/log: " << Show(s2 / "log") << "\n"
            << "  alice write //S1/vhd  -> S2/vhd.tmp: " << Show(s2 / "vhd.tmp")
            << "; alice reads it back: \"" << tracked.substr(0, 15) << "\"\n"
            << "  read //S1/big across 512K: \"" << head
            << "\" (B from S2, A from S1)\n"
            << "\nrules now (track_writes added a read rule):\n";
  for (const auto& r : host.sswitch().ListRules()) {
    std::cout << "  " << sroute::FormatRuleInfo(r)
              << "   [ops=" << r.counters.ops << "]\n";
  }
  return 0;
}
