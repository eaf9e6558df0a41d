// SPDX-License-Identifier: Apache-2.0
#include "rules/rule.h"

#include "util/strings.h"

namespace sroute {

std::optional<std::string_view> DelegateSpec::Arg(std::string_view key,
                                                  int position) const {
  int index = 0;
  for (const DelegateArg& a : args) {
    if (!a.key.empty() && a.key == key) return a.value;
    if (a.key.empty()) {
      if (index == position) return a.value;
      ++index;
    }
  }
  return std::nullopt;
}

bool IsTapDelegate(std::string_view name) { return name == "trace"; }

bool Rule::MatchesIgnoringRange(const IoHeader& h) const {
  return pattern.source.Matches(h) && (pattern.ops & h.op_class()) != 0 &&
         pattern.file.MatchesName(h.file);
}

bool FilePattern::MatchesName(std::string_view file) const {
  switch (kind) {
    case Kind::kAny:
      return true;
    case Kind::kExact:
      return file == text;
    case Kind::kPrefix:
      return file.starts_with(text);
    case Kind::kRegex:
      return false;  // needs the compiled RE2
  }
  return false;
}

std::string_view MatchedSuffix(const FilePattern& pattern,
                               std::string_view file) {
  switch (pattern.kind) {
    case FilePattern::Kind::kExact:
      return {};
    case FilePattern::Kind::kPrefix:
      return file.size() >= pattern.text.size()
                 ? file.substr(pattern.text.size())
                 : std::string_view();
    case FilePattern::Kind::kAny:
    case FilePattern::Kind::kRegex: {
      FileName name;
      return SplitFileName(file, &name) ? name.path : std::string_view();
    }
  }
  return {};
}

std::string ResolveTargetFile(const Target& target, const FilePattern& pattern,
                              std::string_view file) {
  if (!target.keeps_suffix()) return target.file;
  std::string_view base(target.file);
  base.remove_suffix(1);
  return StrCat(base, MatchedSuffix(pattern, file));
}

}  // namespace sroute
