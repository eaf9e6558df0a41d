// SPDX-License-Identifier: Apache-2.0
#include "rules/pattern_matcher.h"

#include <algorithm>

#include "re2/re2.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<PatternMatcher> PatternMatcher::Create(
    const HeaderPattern& pattern) {
  PatternMatcher m;
  m.pattern_ = pattern;
  if (pattern.file.kind == FilePattern::Kind::kRegex) {
    RE2::Options opts;
    opts.set_log_errors(false);
    auto re = std::make_shared<RE2>(pattern.file.text, opts);
    if (!re->ok()) {
      return absl::InvalidArgumentError(
          StrCat("bad regular expression: ", re->error()));
    }
    m.regex_ = std::move(re);
  }
  return m;
}

bool PatternMatcher::MatchesFile(std::string_view file) const {
  const FilePattern& f = pattern_.file;
  return f.kind == FilePattern::Kind::kRegex ? RE2::FullMatch(file, *regex_)
                                             : f.MatchesName(file);
}

bool PatternMatcher::Matches(const IoHeader& h) const {
  if (!pattern_.source.Matches(h)) return false;
  if ((pattern_.ops & h.op_class()) == 0) return false;
  if (!MatchesFile(h.file)) return false;
  const FilePattern& f = pattern_.file;
  if (f.range && HasByteExtent(h.op)) {
    return f.range->Overlaps(h.offset, std::max(h.end(), h.offset + 1));
  }
  return true;
}

}  // namespace sroute
