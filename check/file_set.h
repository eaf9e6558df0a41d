// SPDX-License-Identifier: Apache-2.0
// FileSet: the set of file names ("//HOST/PATH") a rule's file pattern
// names, as an automaton the rule checker (check/checker.h) can compare:
// is one set inside the union of others, do two sets meet, and if not,
// which name shows it.
//
// Names are strings of Unicode code points (UTF-8 decoded; a byte that is
// not valid UTF-8 is a code point of its own above U+10FFFF, which no
// regex class matches, as RE2 in UTF-8 mode does not match it). Regexes are
// compiled from RE2's syntax for the part rules use: literals and escapes,
// '.', classes (with \d \w \s and their negations), groups, alternation,
// * + ? {n} {n,} {n,m} (lazy forms too), and ^/$ at the ends (rules match
// anchored at both ends anyway). Other syntax (flags such as (?i), \b, \p,
// \Q...\E) makes FileSet::Regex fail with the reason: the checker then
// says it did not analyse that regex rather than guess.
//
// Thread safety: a FileSet is immutable after construction; Witness is a
// free function over const sets.
#ifndef SROUTE_CHECK_FILE_SET_H_
#define SROUTE_CHECK_FILE_SET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/rule.h"

namespace sroute::check {

class FileSet {
 public:
  // Every name.
  static FileSet Any();
  // Exactly `name`.
  static FileSet Exact(std::string_view name);
  // Every name starting with `prefix`.
  static FileSet Prefix(std::string_view prefix);
  // The names the RE2 regex `re` matches in full. Fails (kUnimplemented)
  // on syntax outside the supported part, naming it.
  static absl::StatusOr<FileSet> Regex(std::string_view re);
  // The set `pattern` names (its byte range aside).
  static absl::StatusOr<FileSet> Of(const FilePattern& pattern);
  // Names of the form //HOST/PATH (HOST not empty and without '/'), the
  // only ones an IO can carry.
  static const FileSet& Valid();
  // Valid names with a non-empty PATH: files, not an endpoint's root.
  static const FileSet& NonRoot();

  // Whether `name` is in the set.
  bool Contains(std::string_view name) const;

  struct Nfa;  // file_set.cc

 private:
  explicit FileSet(std::shared_ptr<const Nfa> nfa) : nfa_(std::move(nfa)) {}
  friend std::optional<std::string> FindName(
      const std::vector<const FileSet*>& in,
      const std::vector<const FileSet*>& out, size_t max_states, bool* gave_up);
  std::shared_ptr<const Nfa> nfa_;
};

// A name in every set of `in` and in none of `out` (shortest first, with
// readable characters where the sets allow), or nullopt if there is none.
// Gives up after exploring `max_states` combined states, setting *gave_up
// (the answer is then nullopt without proof).
std::optional<std::string> FindName(const std::vector<const FileSet*>& in,
                                    const std::vector<const FileSet*>& out,
                                    size_t max_states = 20000,
                                    bool* gave_up = nullptr);

}  // namespace sroute::check

#endif  // SROUTE_CHECK_FILE_SET_H_
