// SPDX-License-Identifier: Apache-2.0
// Rule: `pattern -> [delegate;] detour, detour, ...` (docs/design.md §4).
#ifndef SROUTE_RULES_RULE_H_
#define SROUTE_RULES_RULE_H_

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rules/io_header.h"

namespace sroute {

// Half-open byte range [start, end).
struct ByteRange {
  uint64_t start = 0;
  uint64_t end = 0;
  bool Overlaps(uint64_t a, uint64_t b) const { return start < b && a < end; }
  auto operator<=>(const ByteRange&) const = default;
};

struct SourcePattern {
  enum class Kind : uint8_t {
    kAny,     // '*': every IO a tenant issued (not IOs handed back by stages)
    kTenant,  // NAME: IOs the tenant NAME issued
    kStage,   // stage:NAME: IOs that stage NAME handed back to the sSwitch
  };
  Kind kind = Kind::kAny;
  std::string name;

  bool Matches(const IoHeader& h) const {
    switch (kind) {
      case Kind::kAny:
        return h.stage.empty();
      case Kind::kTenant:
        return h.stage.empty() && h.source == name;
      case Kind::kStage:
        return h.stage == name;
    }
    return false;
  }
  auto operator<=>(const SourcePattern&) const = default;
};

struct FilePattern {
  enum class Kind : uint8_t {
    kAny,     // '*'
    kExact,   // //HOST/PATH
    kPrefix,  // //HOST/PATH*   (text holds the part before '*')
    kRegex,   // re:RE2, anchored at both ends, matched against "//HOST/PATH"
  };
  Kind kind = Kind::kAny;
  std::string text;
  std::optional<ByteRange> range;
  // Whether `file` ("//HOST/PATH") is one this pattern names, range aside.
  // False for kRegex: that takes the compiled RE2 (RuleTable,
  // PatternMatcher).
  bool MatchesName(std::string_view file) const;
  auto operator<=>(const FilePattern&) const = default;
};

struct HeaderPattern {
  SourcePattern source;
  OpClassMask ops = kAllOpClasses;
  FilePattern file;
  // Ordered (field by field) for sorting and de-duplication.
  auto operator<=>(const HeaderPattern&) const = default;
};

struct Target {
  enum class Kind : uint8_t { kFile, kStage, kController };
  Kind kind = Kind::kFile;
  // kFile: "//HOST/PATH", ending in '*' when the matched suffix is appended.
  std::string file;
  // kStage: the stage's name, and the host it lives on (empty: this host).
  std::string stage;
  std::string stage_host;

  bool keeps_suffix() const {
    return kind == Kind::kFile && !file.empty() && file.back() == '*';
  }
  bool operator==(const Target&) const = default;
};

struct Detour {
  enum class What : uint8_t {
    kIo,      // the whole IO goes to the target
    kHeader,  // a copy of the header goes to the target; the IO goes on
    kF,       // the delegate's emitted value goes to the target
  };
  What what = What::kIo;
  Target target;
  bool operator==(const Detour&) const = default;
};

struct DelegateArg {
  std::string key;  // empty for a positional argument
  std::string value;
  bool operator==(const DelegateArg&) const = default;
};

struct DelegateSpec {
  std::string name;
  std::vector<DelegateArg> args;
  // The value of `key=...`, or of the positional argument at `position`.
  std::optional<std::string_view> Arg(std::string_view key,
                                      int position = -1) const;
  bool operator==(const DelegateSpec&) const = default;
};

// A rule is a tap when it has no detours (`pattern -> trace(P)`): it never
// routes; every tap an IO matches runs its delegate at the IO's first
// sSwitch, before the forwarding rules (which then route it as if the tap
// were not there). Only observing delegates can be taps.
bool IsTapDelegate(std::string_view name);

struct Rule {
  int32_t priority = 0;  // '@N'; higher first, then insertion order
  HeaderPattern pattern;
  std::optional<DelegateSpec> delegate;
  std::vector<Detour> detours;
  // Scatter acknowledgement: a write to several IO detours completes once
  // `ack` of them succeeded; 0 means all of them ("ack=all").
  uint32_t ack = 0;

  bool is_tap() const { return detours.empty(); }
  // True when the header matches source, op class and file (ignoring any
  // byte range of the pattern).
  bool MatchesIgnoringRange(const IoHeader& h) const;
  bool operator==(const Rule&) const = default;
};

// The matched suffix of `file` under `pattern` (what a '*' in a target
// stands for): the part after the prefix for prefix patterns, PATH for '*'
// and regex patterns, empty for exact patterns.
std::string_view MatchedSuffix(const FilePattern& pattern,
                               std::string_view file);

// The file an IO detour to `target` sends `file` to.
std::string ResolveTargetFile(const Target& target, const FilePattern& pattern,
                              std::string_view file);

}  // namespace sroute

#endif  // SROUTE_RULES_RULE_H_
