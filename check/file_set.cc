// SPDX-License-Identifier: Apache-2.0
#include "check/file_set.h"

#include <algorithm>
#include <cctype>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

// Code points: Unicode's, then one per byte that is not valid UTF-8.
constexpr uint32_t kMaxUnicode = 0x10FFFF;
constexpr uint32_t kRawByteBase = 0x110000;
constexpr uint32_t kMaxRune = kRawByteBase + 0xFF;

struct Range {
  uint32_t lo = 0, hi = 0;  // inclusive
};

std::vector<uint32_t> Decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int n = b0 < 0x80         ? 1
            : (b0 >> 5) == 6  ? 2
            : (b0 >> 4) == 14 ? 3
            : (b0 >> 3) == 30 ? 4
                              : 0;
    uint32_t r = n == 1   ? b0
                 : n == 2 ? (b0 & 0x1F)
                 : n == 3 ? (b0 & 0x0F)
                          : (b0 & 0x07);
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b >> 6) == 2;
      r = (r << 6) | (b & 0x3F);
    }
    // Overlong forms and surrogates are not valid UTF-8 either.
    if (ok && ((n == 2 && r < 0x80) || (n == 3 && r < 0x800) ||
               (n == 4 && (r < 0x10000 || r > kMaxUnicode)) ||
               (r >= 0xD800 && r <= 0xDFFF))) {
      ok = false;
    }
    if (!ok) {
      out.push_back(kRawByteBase + b0);
      ++i;
      continue;
    }
    out.push_back(r);
    i += n;
  }
  return out;
}

void Encode(uint32_t r, std::string* out) {
  if (r >= kRawByteBase) {
    out->push_back(static_cast<char>(r - kRawByteBase));
  } else if (r < 0x80) {
    out->push_back(static_cast<char>(r));
  } else if (r < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (r >> 6)));
    out->push_back(static_cast<char>(0x80 | (r & 0x3F)));
  } else if (r < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (r >> 12)));
    out->push_back(static_cast<char>(0x80 | ((r >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (r & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (r >> 18)));
    out->push_back(static_cast<char>(0x80 | ((r >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((r >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (r & 0x3F)));
  }
}

// Sorts and merges overlapping or adjacent ranges.
std::vector<Range> Normalize(std::vector<Range> v) {
  std::sort(v.begin(), v.end(),
            [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> out;
  for (const Range& r : v) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// The complement within Unicode (classes never match raw bytes).
std::vector<Range> Complement(const std::vector<Range>& v) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& r : Normalize(v)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxUnicode) out.push_back({next, kMaxUnicode});
  return out;
}

// A parsed regex.
struct Node {
  enum class Kind { kClass, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;  // an empty concat matches the empty string
  std::vector<Range> cls;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max -1: no bound
};

Node Class(std::vector<Range> ranges) {
  Node n;
  n.kind = Node::Kind::kClass;
  n.cls = Normalize(std::move(ranges));
  return n;
}

// Recursive descent over RE2's syntax (the part FileSet supports).
class RegexParser {
 public:
  explicit RegexParser(std::string_view re) : r_(Decode(re)) {}

  absl::StatusOr<Node> Parse() {
    if (Peek('^')) ++pos_;
    Node n = Alt();
    if (!error_.empty()) return absl::UnimplementedError(error_);
    if (pos_ < r_.size()) {
      return absl::UnimplementedError(StrCat("unexpected ')' at ", pos_ + 1,
                                             " (a regex the checker ",
                                             "does not parse)"));
    }
    return n;
  }

 private:
  bool Peek(uint32_t c) const { return pos_ < r_.size() && r_[pos_] == c; }
  void Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  Node Alt() {
    Node first = Concat();
    if (!Peek('|')) return first;
    Node alt;
    alt.kind = Node::Kind::kAlt;
    alt.kids.push_back(std::move(first));
    while (Peek('|') && error_.empty()) {
      ++pos_;
      alt.kids.push_back(Concat());
    }
    return alt;
  }

  Node Concat() {
    Node cat;
    while (pos_ < r_.size() && !Peek('|') && !Peek(')') && error_.empty()) {
      // '$' ends the regex only as its last character.
      if (Peek('$')) {
        if (pos_ + 1 == r_.size()) {
          ++pos_;
          break;
        }
        Fail("'$' before the end of the regex");
        break;
      }
      cat.kids.push_back(Repeat());
    }
    return cat;
  }

  Node Repeat() {
    Node atom = Atom();
    while (pos_ < r_.size() && error_.empty()) {
      int min = 0, max = -1;
      const uint32_t c = r_[pos_];
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{' && Bounds(&min, &max)) {
        if (min > 1000 || max > 1000) {
          Fail("a repetition count over 1000");
          return atom;
        }
      } else {
        break;
      }
      if (Peek('?')) ++pos_;  // lazy: the same language
      Node rep;
      rep.kind = Node::Kind::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  // {n}, {n,} or {n,m} at pos_; false (pos_ kept) when '{' is a literal.
  bool Bounds(int* min, int* max) {
    size_t p = pos_ + 1;
    auto number = [&](int* out) {
      const size_t start = p;
      int64_t v = 0;
      while (p < r_.size() && r_[p] >= '0' && r_[p] <= '9') {
        v = std::min<int64_t>(v * 10 + (r_[p] - '0'), 1 << 20);
        ++p;
      }
      *out = static_cast<int>(v);
      return p > start;
    };
    if (!number(min)) return false;
    if (p < r_.size() && r_[p] == '}') {
      *max = *min;
    } else if (p < r_.size() && r_[p] == ',') {
      ++p;
      if (p < r_.size() && r_[p] == '}') {
        *max = -1;
      } else if (!number(max) || p >= r_.size() || r_[p] != '}') {
        return false;
      }
    } else {
      return false;
    }
    pos_ = p + 1;
    return true;
  }

  Node Atom() {
    const uint32_t c = r_[pos_++];
    switch (c) {
      case '(': {
        if (Peek('?')) {
          if (pos_ + 1 < r_.size() && r_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if (pos_ + 1 < r_.size() &&
                     (r_[pos_ + 1] == 'P' || r_[pos_ + 1] == '<')) {
            while (pos_ < r_.size() && r_[pos_] != '>') ++pos_;
            ++pos_;
          } else {
            Fail("regex flags (?...)");
            return {};
          }
        }
        Node inner = Alt();
        if (!Peek(')')) {
          Fail("a missing ')'");
          return {};
        }
        ++pos_;
        return inner;
      }
      case '.':
        return Class({{0, '\n' - 1}, {'\n' + 1, kMaxUnicode}});
      case '[':
        return Bracket();
      case '\\':
        return Class(Escape(/*in_class=*/false));
      case '^':
        Fail("'^' after the start of the regex");
        return {};
      case '*':
      case '+':
      case '?':
        Fail("a repetition with nothing to repeat");
        return {};
      default:
        return Class({{c, c}});
    }
  }

  // After '\\'; the ranges the escape stands for.
  std::vector<Range> Escape(bool in_class) {
    if (pos_ >= r_.size()) {
      Fail("a trailing '\\'");
      return {};
    }
    const uint32_t c = r_[pos_++];
    static const std::vector<Range> kDigit = {{'0', '9'}};
    static const std::vector<Range> kWord = {
        {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const std::vector<Range> kSpace = {
        {'\t', '\n'}, {'\f', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        return kDigit;
      case 'D':
        return Complement(kDigit);
      case 'w':
        return kWord;
      case 'W':
        return Complement(kWord);
      case 's':
        return kSpace;
      case 'S':
        return Complement(kSpace);
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case 'a':
        return {{7, 7}};
      case 'x': {
        uint32_t v = 0;
        auto hex = [](uint32_t h) -> int {
          if (h >= '0' && h <= '9') return h - '0';
          if (h >= 'a' && h <= 'f') return h - 'a' + 10;
          if (h >= 'A' && h <= 'F') return h - 'A' + 10;
          return -1;
        };
        if (Peek('{')) {
          ++pos_;
          while (pos_ < r_.size() && hex(r_[pos_]) >= 0) {
            v = std::min<uint32_t>(v * 16 + hex(r_[pos_++]), kMaxUnicode + 1);
          }
          if (!Peek('}') || v > kMaxUnicode) {
            Fail("a bad \\x{...}");
            return {};
          }
          ++pos_;
        } else {
          for (int k = 0; k < 2; ++k) {
            if (pos_ >= r_.size() || hex(r_[pos_]) < 0) {
              Fail("a bad \\xHH");
              return {};
            }
            v = v * 16 + hex(r_[pos_++]);
          }
        }
        return {{v, v}};
      }
      default:
        // Punctuation stands for itself; letters and digits are classes or
        // assertions the checker does not model.
        if (c < 0x80 && !std::isalnum(static_cast<int>(c))) return {{c, c}};
        Fail(StrCat("the escape \\", std::string(1, static_cast<char>(c)),
                    in_class ? " in a class" : ""));
        return {};
    }
  }

  Node Bracket() {
    bool negate = false;
    if (Peek('^')) {
      negate = true;
      ++pos_;
    }
    std::vector<Range> ranges;
    bool first = true;
    while (pos_ < r_.size() && error_.empty() && (first || !Peek(']'))) {
      first = false;
      if (Peek('[') && pos_ + 1 < r_.size() && r_[pos_ + 1] == ':') {
        Fail("a POSIX class [:...:]");
        return {};
      }
      // One end of a range: a character or a single-character escape.
      auto one = [&](uint32_t* out) -> bool {
        if (Peek('\\')) {
          ++pos_;
          std::vector<Range> e = Escape(/*in_class=*/true);
          if (e.size() == 1 && e[0].lo == e[0].hi) {
            *out = e[0].lo;
            return true;
          }
          ranges.insert(ranges.end(), e.begin(), e.end());
          return false;  // a class escape: no range from it
        }
        *out = r_[pos_++];
        return true;
      };
      uint32_t lo = 0;
      if (!one(&lo)) continue;
      if (Peek('-') && pos_ + 1 < r_.size() && r_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (!one(&hi) || hi < lo) {
          Fail("a bad class range");
          return {};
        }
        ranges.push_back({lo, hi});
      } else {
        ranges.push_back({lo, lo});
      }
    }
    if (!Peek(']')) {
      Fail("a missing ']'");
      return {};
    }
    ++pos_;
    return Class(negate ? Complement(ranges) : ranges);
  }

  std::vector<uint32_t> r_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

// A Thompson NFA over code points.
struct FileSet::Nfa {
  struct State {
    std::vector<int> eps;
    std::vector<std::pair<Range, int>> next;
  };
  std::vector<State> states;
  int start = 0;
  int accept = 0;

  int Add() {
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  // Builds `n` between new states; returns {in, out}.
  std::pair<int, int> Build(const Node& n) {
    const int in = Add(), out = Add();
    switch (n.kind) {
      case Node::Kind::kClass:
        for (const Range& r : n.cls) states[in].next.push_back({r, out});
        break;
      case Node::Kind::kConcat: {
        int at = in;
        for (const Node& k : n.kids) {
          auto [a, b] = Build(k);
          states[at].eps.push_back(a);
          at = b;
        }
        states[at].eps.push_back(out);
        break;
      }
      case Node::Kind::kAlt:
        for (const Node& k : n.kids) {
          auto [a, b] = Build(k);
          states[in].eps.push_back(a);
          states[b].eps.push_back(out);
        }
        break;
      case Node::Kind::kRepeat: {
        int at = in;
        for (int i = 0; i < n.min; ++i) {
          auto [a, b] = Build(n.kids[0]);
          states[at].eps.push_back(a);
          at = b;
        }
        if (n.max < 0) {
          auto [a, b] = Build(n.kids[0]);
          states[at].eps.push_back(a);
          states[b].eps.push_back(a);
          states[b].eps.push_back(out);
        } else {
          for (int i = n.min; i < n.max; ++i) {
            auto [a, b] = Build(n.kids[0]);
            states[at].eps.push_back(a);
            states[at].eps.push_back(out);
            at = b;
          }
        }
        states[at].eps.push_back(out);
        break;
      }
    }
    return {in, out};
  }
  // A chain for the code points of `text`, from a new start; returns its
  // last state.
  int Chain(std::string_view text) {
    start = Add();
    int at = start;
    for (uint32_t r : Decode(text)) {
      const int next = Add();
      states[at].next.push_back({{r, r}, next});
      at = next;
    }
    return at;
  }
};

FileSet FileSet::Any() {
  auto nfa = std::make_shared<Nfa>();
  nfa->start = nfa->accept = nfa->Add();
  nfa->states[0].next.push_back({{0, kMaxRune}, 0});
  return FileSet(std::move(nfa));
}

FileSet FileSet::Exact(std::string_view name) {
  auto nfa = std::make_shared<Nfa>();
  nfa->accept = nfa->Chain(name);
  return FileSet(std::move(nfa));
}

FileSet FileSet::Prefix(std::string_view prefix) {
  auto nfa = std::make_shared<Nfa>();
  nfa->accept = nfa->Chain(prefix);
  nfa->states[nfa->accept].next.push_back({{0, kMaxRune}, nfa->accept});
  return FileSet(std::move(nfa));
}

absl::StatusOr<FileSet> FileSet::Regex(std::string_view re) {
  absl::StatusOr<Node> node = RegexParser(re).Parse();
  if (!node.ok()) return node.status();
  auto nfa = std::make_shared<Nfa>();
  auto [in, out] = nfa->Build(*node);
  nfa->start = in;
  nfa->accept = out;
  if (nfa->states.size() > 100000) {
    return absl::UnimplementedError("a regex over 100000 automaton states");
  }
  return FileSet(std::move(nfa));
}

absl::StatusOr<FileSet> FileSet::Of(const FilePattern& pattern) {
  switch (pattern.kind) {
    case FilePattern::Kind::kAny:
      return Any();
    case FilePattern::Kind::kExact:
      return Exact(pattern.text);
    case FilePattern::Kind::kPrefix:
      return Prefix(pattern.text);
    case FilePattern::Kind::kRegex:
      return Regex(pattern.text);
  }
  return Any();
}

namespace {
// //HOST/PATH, HOST not empty; PATH not empty unless `root_too`.
std::shared_ptr<FileSet::Nfa> NameNfa(bool root_too);
}  // namespace

const FileSet& FileSet::Valid() {
  static const FileSet* const valid = new FileSet(NameNfa(true));
  return *valid;
}

const FileSet& FileSet::NonRoot() {
  static const FileSet* const files = new FileSet(NameNfa(false));
  return *files;
}

namespace {
std::shared_ptr<FileSet::Nfa> NameNfa(bool root_too) {
  {
    auto nfa = std::make_shared<FileSet::Nfa>();
    const int s0 = nfa->Add(), s1 = nfa->Add(), s2 = nfa->Add(),
              host = nfa->Add(), path = nfa->Add();
    nfa->start = s0;
    nfa->accept = path;
    nfa->states[s0].next.push_back({{'/', '/'}, s1});
    nfa->states[s1].next.push_back({{'/', '/'}, s2});
    for (int from : {s2, host}) {
      nfa->states[from].next.push_back({{1, '/' - 1}, host});
      nfa->states[from].next.push_back({{'/' + 1, kMaxRune}, host});
    }
    if (root_too) {
      nfa->states[host].next.push_back({{'/', '/'}, path});
      nfa->states[path].next.push_back({{1, kMaxRune}, path});
    } else {
      const int slash = nfa->Add();
      nfa->states[host].next.push_back({{'/', '/'}, slash});
      nfa->states[slash].next.push_back({{1, kMaxRune}, path});
      nfa->states[path].next.push_back({{1, kMaxRune}, path});
    }
    return nfa;
  }
}
}  // namespace

namespace {

using StateSet = std::vector<int>;  // sorted, epsilon-closed

void Close(const FileSet::Nfa& nfa, StateSet* set) {
  std::vector<int> stack(set->begin(), set->end());
  std::vector<char> seen(nfa.states.size(), 0);
  for (int s : *set) seen[s] = 1;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int e : nfa.states[s].eps) {
      if (!seen[e]) {
        seen[e] = 1;
        set->push_back(e);
        stack.push_back(e);
      }
    }
  }
  std::sort(set->begin(), set->end());
}

StateSet Step(const FileSet::Nfa& nfa, const StateSet& from, uint32_t rune) {
  StateSet out;
  for (int s : from) {
    for (const auto& [range, to] : nfa.states[s].next) {
      if (range.lo <= rune && rune <= range.hi) out.push_back(to);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  Close(nfa, &out);
  return out;
}

bool Accepts(const FileSet::Nfa& nfa, const StateSet& set) {
  return std::binary_search(set.begin(), set.end(), nfa.accept);
}

// A readable code point of [lo, hi].
uint32_t Representative(uint32_t lo, uint32_t hi) {
  static constexpr std::string_view kPreferred =
      "xyzabcdefghijklmnopqrstuvw0123456789._-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  for (char c : kPreferred) {
    const auto r = static_cast<uint32_t>(c);
    if (lo <= r && r <= hi) return r;
  }
  if (lo <= 0x7E && hi >= 0x21) return std::max<uint32_t>(lo, 0x21);
  if (lo == 0 && hi >= 1) return 1;
  return lo;
}

}  // namespace

bool FileSet::Contains(std::string_view name) const {
  StateSet set = {nfa_->start};
  Close(*nfa_, &set);
  for (uint32_t r : Decode(name)) {
    set = Step(*nfa_, set, r);
    if (set.empty()) return false;
  }
  return Accepts(*nfa_, set);
}

std::optional<std::string> FindName(const std::vector<const FileSet*>& in,
                                    const std::vector<const FileSet*>& out,
                                    size_t max_states, bool* gave_up) {
  if (gave_up != nullptr) *gave_up = false;
  std::vector<const FileSet::Nfa*> nfas;
  for (const FileSet* s : in) nfas.push_back(s->nfa_.get());
  for (const FileSet* s : out) nfas.push_back(s->nfa_.get());
  const size_t n_in = in.size();

  // The alphabet cut where any transition's range starts or ends: within a
  // piece every transition either takes every code point or none.
  std::vector<uint32_t> cuts = {0};
  for (const FileSet::Nfa* nfa : nfas) {
    for (const auto& st : nfa->states) {
      for (const auto& [range, to] : st.next) {
        cuts.push_back(range.lo);
        if (range.hi < kMaxRune) cuts.push_back(range.hi + 1);
      }
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<uint32_t> letters;
  for (size_t i = 0; i < cuts.size(); ++i) {
    const uint32_t hi = i + 1 < cuts.size() ? cuts[i + 1] - 1 : kMaxRune;
    letters.push_back(Representative(cuts[i], hi));
  }
  // Readable letters first, so the shortest name found reads well.
  auto rank = [](uint32_t r) {
    if (r >= 'a' && r <= 'z') return 0;
    if (r >= '0' && r <= '9') return 1;
    if (r < 0x7F && r > 0x20) return 2;
    return 3;
  };
  std::stable_sort(letters.begin(), letters.end(),
                   [&](uint32_t a, uint32_t b) { return rank(a) < rank(b); });

  struct Node {
    std::vector<StateSet> sets;
    int parent;
    uint32_t letter;
  };
  std::vector<Node> nodes;
  absl::flat_hash_map<std::string, int> seen;
  auto key_of = [](const std::vector<StateSet>& sets) {
    std::string k;
    for (const StateSet& s : sets) {
      k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int));
      k.push_back('|');
    }
    return k;
  };
  Node root{{}, -1, 0};
  for (const FileSet::Nfa* nfa : nfas) {
    StateSet s = {nfa->start};
    Close(*nfa, &s);
    root.sets.push_back(std::move(s));
  }
  seen.emplace(key_of(root.sets), 0);
  nodes.push_back(std::move(root));
  std::deque<int> queue = {0};
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    bool found = true;
    for (size_t i = 0; found && i < nfas.size(); ++i) {
      found = Accepts(*nfas[i], nodes[at].sets[i]) == (i < n_in);
    }
    if (found) {
      std::vector<uint32_t> runes;
      for (int k = at; nodes[k].parent >= 0; k = nodes[k].parent) {
        runes.push_back(nodes[k].letter);
      }
      std::string name;
      for (auto it = runes.rbegin(); it != runes.rend(); ++it) {
        Encode(*it, &name);
      }
      return name;
    }
    for (uint32_t letter : letters) {
      std::vector<StateSet> next;
      next.reserve(nfas.size());
      bool alive = true;
      for (size_t i = 0; alive && i < nfas.size(); ++i) {
        next.push_back(Step(*nfas[i], nodes[at].sets[i], letter));
        alive = i >= n_in || !next.back().empty();
      }
      if (!alive) continue;
      auto [it, fresh] = seen.emplace(key_of(next), nodes.size());
      if (!fresh) continue;
      if (nodes.size() >= max_states) {
        if (gave_up != nullptr) *gave_up = true;
        return std::nullopt;
      }
      nodes.push_back(Node{std::move(next), at, letter});
      queue.push_back(static_cast<int>(nodes.size()) - 1);
    }
  }
  return std::nullopt;
}

}  // namespace sroute::check
