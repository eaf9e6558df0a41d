// SPDX-License-Identifier: Apache-2.0
// The checker engine's helpers (check/engine.h).
#include "check/engine.h"

namespace sroute::check::internal {

// A string every match of RE2 regex `re` starts with: its leading literal
// characters (none if an alternative is at the top level).
std::string LiteralPrefix(std::string_view re) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return "";
    }
  }
  std::string out;
  size_t i = re.starts_with("^") ? 1 : 0;
  while (i < re.size()) {
    char c = re[i];
    size_t next = i + 1;
    if (c == '\\') {
      if (i + 1 >= re.size()) break;
      c = re[i + 1];
      if (std::isalnum(static_cast<unsigned char>(c))) break;  // a class
      next = i + 2;
    } else if (std::string_view(".^$|?*+()[]{}").find(c) !=
               std::string_view::npos) {
      break;
    }
    // A quantifier after it makes the character optional.
    if (next < re.size() &&
        std::string_view("?*{").find(re[next]) != std::string_view::npos) {
      break;
    }
    out.push_back(c);
    i = next;
  }
  return out;
}

// A name in every set of `in` and none of `out`, a file's name (non-empty
// PATH) if there is one, else an endpoint's root.
std::optional<std::string> FindWitness(std::vector<const FileSet*> in,
                                       const std::vector<const FileSet*>& out,
                                       bool* gave_up) {
  in.push_back(&FileSet::NonRoot());
  std::optional<std::string> name = FindName(in, out, 20000, gave_up);
  if (name || (gave_up != nullptr && *gave_up)) return name;
  in.back() = &FileSet::Valid();
  return FindName(in, out, 20000, gave_up);
}

bool SourceMeets(const SourcePattern& a, const SourcePattern& b) {
  using K = SourcePattern::Kind;
  if (a.kind == K::kStage || b.kind == K::kStage) {
    return a.kind == b.kind && a.name == b.name;
  }
  return a.kind == K::kAny || b.kind == K::kAny || a.name == b.name;
}

// `name` with control characters and non-UTF-8 bytes escaped (C style), so
// a witness with a newline in its name prints on one line.
std::string Printable(std::string_view name) {
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7F) {
      out +=
          StrCat("\\x", "0123456789abcdef"[u >> 4], "0123456789abcdef"[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatHeader(const IoHeader& h) {
  std::string src = h.stage.empty()
                        ? h.source
                        : StrCat("stage:", h.stage, " (", h.source, ")");
  std::string out =
      StrCat("<", src, ", ", OpName(h.op), ", ", Printable(h.file));
  if (HasByteExtent(h.op)) {
    out += StrCat(", ", h.offset, ", ", h.length);
  }
  return out + ">";
}

std::string FormatRange(uint64_t a, uint64_t b) {
  return StrCat("[", FormatSize(a), ":", b == kEnd ? "" : FormatSize(b), "]");
}

// A tenant name no rule of `rel` names.
std::string OtherTenant(const std::vector<RuleRec*>& rel) {
  for (int i = 0;; ++i) {
    std::string name = i == 0 ? "tenant-x" : StrCat("tenant-x", i);
    bool used = false;
    for (RuleRec* o : rel) used = used || o->rule().pattern.source.name == name;
    if (!used) return name;
  }
}

// A read or write header both `a` and `b` match (ranged or not), if any.
std::optional<IoHeader> Meeting(RuleRec* a, RuleRec* b) {
  const HeaderPattern& pa = a->rule().pattern;
  const HeaderPattern& pb = b->rule().pattern;
  if (!SourceMeets(pa.source, pb.source)) return std::nullopt;
  IoHeader h;
  h.source = "tenant-x";
  if (pa.source.kind == SourcePattern::Kind::kStage) {
    h.stage = pa.source.name;
  } else if (pa.source.kind == SourcePattern::Kind::kTenant) {
    h.source = pa.source.name;
  } else if (pb.source.kind == SourcePattern::Kind::kTenant) {
    h.source = pb.source.name;
  }
  const OpClassMask ops = pa.ops & pb.ops;
  if (ops & kOpClassRead) {
    h.op = Op::kRead;
  } else if (ops & kOpClassWrite) {
    h.op = Op::kWrite;
  } else {
    return std::nullopt;
  }
  uint64_t lo = 0, hi = kEnd;
  for (RuleRec* r : {a, b}) {
    if (r->ranged()) {
      lo = std::max(lo, r->file().range->start);
      hi = std::min(hi, r->file().range->end);
    }
  }
  if (lo >= hi) return std::nullopt;
  h.offset = lo;
  h.length = std::min(hi - lo, kWitnessLength);
  using K = FilePattern::Kind;
  const FilePattern& fa = a->file();
  const FilePattern& fb = b->file();
  if (fa.kind == K::kExact || fb.kind == K::kExact) {
    const std::string& name = fa.kind == K::kExact ? fa.text : fb.text;
    if (!a->MatchesName(name) || !b->MatchesName(name)) return std::nullopt;
    h.file = name;
    return h;
  }
  const auto& sa = a->Files();
  const auto& sb = b->Files();
  if (!sa.ok() || !sb.ok()) return std::nullopt;
  std::optional<std::string> name = FindWitness({&*sa, &*sb}, {});
  if (!name) return std::nullopt;
  h.file = *name;
  return h;
}

const RuleEntry* Winner(const RuleTable& t, IoHeader* h) {
  RuleTable::Pieces pieces;
  t.Route(*h, &pieces);
  if (pieces.empty()) return nullptr;
  if (HasByteExtent(h->op)) {
    h->offset = pieces[0].offset;
    h->length = pieces[0].length;
  }
  return pieces[0].rule;
}

}  // namespace sroute::check::internal
