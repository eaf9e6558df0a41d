// SPDX-License-Identifier: Apache-2.0
#include "rules/parser.h"

#include <charconv>
#include <limits>

#include "rules/validate.h"
#include "util/strings.h"

namespace sroute {
namespace {

bool IsHostChar(char c) { return IsNameChar(c); }

// Thrown nowhere: errors are recorded in `error_` and parsing stops.
class LineParser {
 public:
  explicit LineParser(std::string_view text) : s_(text) {}

  bool ParseRuleLine(Rule* rule) {
    SkipWs();
    if (Peek() == '@') {
      ++pos_;
      const size_t priority_start = pos_;
      int64_t p;
      if (!ParseInt(&p, "a priority after '@'")) return false;
      if (p < std::numeric_limits<int32_t>::min() ||
          p > std::numeric_limits<int32_t>::max()) {
        return Fail(priority_start, "priority out of range");
      }
      rule->priority = static_cast<int32_t>(p);
      SkipWs();
    }
    if (!ParseHeader(&rule->pattern)) return false;
    SkipWs();
    if (!Consume("->")) return Fail(pos_, "expected '->' after the header");
    SkipWs();
    if (Peek() != '<') {
      if (!IsNameChar(Peek())) {
        return Fail(pos_, "expected a delegate call or a detour '<...>'");
      }
      const size_t delegate_pos = pos_;
      DelegateSpec d;
      if (!ParseDelegate(&d)) return false;
      rule->delegate = std::move(d);
      SkipWs();
      if (AtEndOrComment()) {  // a tap: observes, routes nothing
        if (auto fault = CrossPartFault(*rule)) {
          return Fail(delegate_pos, std::move(fault->reason));
        }
        return true;
      }
      if (!Consume(";")) return Fail(pos_, "expected ';' after the delegate");
      SkipWs();
    }
    size_t first_detour = pos_;
    std::vector<size_t> target_columns;
    for (;;) {
      Detour d;
      target_columns.push_back(0);
      if (!ParseDetour(&d, &target_columns.back())) return false;
      rule->detours.push_back(std::move(d));
      SkipWs();
      if (Peek() != ',') break;
      ++pos_;
      SkipWs();
    }
    // Options: NAME=VALUE ...
    while (IsNameChar(Peek())) {
      size_t start = pos_;
      std::string_view key = TakeWhile(IsNameChar);
      if (!Consume("=")) return Fail(pos_, "expected '=' after an option name");
      size_t vstart = pos_;
      std::string_view value = TakeWhile(IsValueChar);
      if (key == "ack") {
        if (value == "all") {
          rule->ack = 0;
        } else {
          uint64_t n = 0;
          auto [p, ec] =
              std::from_chars(value.data(), value.data() + value.size(), n);
          if (ec != std::errc() || p != value.data() + value.size() || n == 0 ||
              n > kMaxAck) {
            return Fail(vstart, "ack must be 'all' or a count of 1 or more");
          }
          rule->ack = static_cast<uint32_t>(n);
        }
      } else {
        return Fail(start, StrCat("unknown option '", key, "' (known: ack)"));
      }
      SkipWs();
    }
    if (!AtEndOrComment()) {
      return Fail(pos_, "unexpected text after the rule");
    }
    return Validate(*rule, first_detour, target_columns);
  }

  bool ParsePatternOnly(HeaderPattern* p) {
    SkipWs();
    if (!ParseHeader(p)) return false;
    SkipWs();
    if (!AtEndOrComment())
      return Fail(pos_, "unexpected text after the pattern");
    return true;
  }

  bool AtEndOrComment() const { return pos_ >= s_.size() || s_[pos_] == '#'; }
  void SkipWs() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  const ParseError& error() const { return error_; }

 private:
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool Consume(std::string_view tok) {
    if (s_.substr(pos_).starts_with(tok)) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  template <typename Pred>
  std::string_view TakeWhile(Pred pred) {
    size_t start = pos_;
    while (pos_ < s_.size() && pred(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  bool Fail(size_t at, std::string reason) {
    if (error_.reason.empty()) {
      error_.column = static_cast<int>(at) + 1;
      error_.reason = std::move(reason);
    }
    return false;
  }
  bool Expect(char c, std::string_view what) {
    SkipWs();
    if (Peek() != c) {
      return Fail(pos_, StrCat("expected '", std::string(1, c), "' ", what));
    }
    ++pos_;
    SkipWs();
    return true;
  }

  bool ParseInt(int64_t* out, std::string_view what) {
    size_t start = pos_;
    const bool plus = Peek() == '+';
    if (Peek() == '-' || plus) ++pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    auto r = std::from_chars(s_.data() + start + (plus ? 1 : 0),
                             s_.data() + pos_, *out);
    if (r.ec == std::errc::result_out_of_range) {
      return Fail(start, "number out of range");
    }
    if (r.ec != std::errc() || r.ptr != s_.data() + pos_) {
      return Fail(start, StrCat("expected ", what));
    }
    return true;
  }

  bool ParseSize(uint64_t* out) {
    size_t start = pos_;
    std::string_view digits =
        TakeWhile([](char c) { return c >= '0' && c <= '9'; });
    if (digits.empty()) return Fail(start, "expected a size (INT[K|M|G])");
    uint64_t v = 0;
    auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (r.ec != std::errc()) return Fail(start, "size out of range");
    int shift = 0;
    switch (Peek()) {
      case 'K':
      case 'k':
        shift = 10;
        ++pos_;
        break;
      case 'M':
      case 'm':
        shift = 20;
        ++pos_;
        break;
      case 'G':
      case 'g':
        shift = 30;
        ++pos_;
        break;
      case 'T':
      case 't':
        shift = 40;
        ++pos_;
        break;
      default:
        break;
    }
    if (shift && v > (std::numeric_limits<uint64_t>::max() >> shift)) {
      return Fail(start, "size out of range");
    }
    *out = v << shift;
    return true;
  }

  bool ParseRange(std::optional<ByteRange>* out) {
    size_t start = pos_;
    ++pos_;  // '['
    ByteRange r;
    if (!ParseSize(&r.start)) return false;
    if (Peek() != ':') return Fail(pos_, "expected ':' in a byte range");
    ++pos_;
    if (!ParseSize(&r.end)) return false;
    if (Peek() != ']')
      return Fail(pos_, "expected ']' to close the byte range");
    ++pos_;
    if (r.end <= r.start) {
      return Fail(start, "empty byte range: the end must be above the start");
    }
    *out = r;
    return true;
  }

  // "//HOST/PATH" with optional trailing '*'. Leaves the text in `out`.
  bool ParseFileName(std::string* out, bool* star) {
    size_t start = pos_;
    if (!Consume("//")) {
      return Fail(pos_, "expected a file '//HOST/PATH'");
    }
    std::string_view host = TakeWhile(IsHostChar);
    if (host.empty()) return Fail(pos_, "expected a host name after '//'");
    if (Peek() != '/') {
      return Fail(pos_, "expected '/' after the host name");
    }
    ++pos_;
    size_t path_start = pos_;
    std::string_view path = TakeWhile(IsPathChar);
    *star = Peek() == '*';
    if (auto fault = PathFault(path, *star)) {
      return Fail(path_start + fault->offset, std::move(fault->reason));
    }
    if (*star) ++pos_;
    *out = std::string(s_.substr(start, pos_ - start - (*star ? 1 : 0)));
    return true;
  }

  bool ParseQuoted(std::string* out) {
    size_t start = pos_;
    ++pos_;  // opening quote
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size() &&
          (s_[pos_ + 1] == '"' || s_[pos_ + 1] == '\\')) {
        ++pos_;
      }
      out->push_back(s_[pos_++]);
    }
    if (Peek() != '"') return Fail(start, "unterminated quoted string");
    ++pos_;
    return true;
  }

  bool ParseFilePattern(FilePattern* f) {
    size_t start = pos_;
    if (Peek() == '*') {
      ++pos_;
      f->kind = FilePattern::Kind::kAny;
      if (Peek() == '[') {
        return Fail(pos_, "a byte range needs a file; '*' matches every file");
      }
      return true;
    }
    if (Consume("re:")) {
      f->kind = FilePattern::Kind::kRegex;
      if (Peek() == '"') {
        if (!ParseQuoted(&f->text)) return false;
      } else {
        std::string_view re = TakeWhile([](char c) {
          return c != '>' && c != ' ' && c != '\t' && c != ',';
        });
        // A trailing "[SIZE:SIZE]" is the byte range, not part of the regex.
        size_t open = re.rfind('[');
        if (open != std::string_view::npos && re.ends_with(']')) {
          std::string_view inside = re.substr(open + 1, re.size() - open - 2);
          size_t colon = inside.find(':');
          auto is_size = [](std::string_view v) {
            if (v.empty()) return false;
            size_t i = 0;
            while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
            return i > 0 &&
                   (i == v.size() || (i + 1 == v.size() &&
                                      std::string_view("KkMmGgTt").find(v[i]) !=
                                          std::string_view::npos));
          };
          if (colon != std::string_view::npos &&
              is_size(inside.substr(0, colon)) &&
              is_size(inside.substr(colon + 1))) {
            pos_ -= re.size() - open;
            re = re.substr(0, open);
          }
        }
        f->text = std::string(re);
      }
      if (std::string why = RegexFault(f->text); !why.empty()) {
        return Fail(start + 3, std::move(why));
      }
    } else {
      bool star = false;
      if (!ParseFileName(&f->text, &star)) return false;
      f->kind = star ? FilePattern::Kind::kPrefix : FilePattern::Kind::kExact;
    }
    if (Peek() == '[') return ParseRange(&f->range);
    return true;
  }

  bool ParseHeader(HeaderPattern* p) {
    if (Peek() != '<') return Fail(pos_, "expected '<' to start the header");
    ++pos_;
    SkipWs();
    // source
    size_t src_start = pos_;
    if (Peek() == '*') {
      ++pos_;
      p->source.kind = SourcePattern::Kind::kAny;
    } else if (Consume("stage:")) {
      std::string_view name = TakeWhile(IsNameChar);
      if (name.empty())
        return Fail(pos_, "expected a stage name after 'stage:'");
      p->source.kind = SourcePattern::Kind::kStage;
      p->source.name = std::string(name);
    } else {
      std::string_view name =
          TakeWhile([](char c) { return IsNameChar(c) || c == ':'; });
      if (name.empty()) {
        return Fail(src_start, "expected a source: '*', NAME or stage:NAME");
      }
      p->source.kind = SourcePattern::Kind::kTenant;
      p->source.name = std::string(name);
    }
    if (!Expect(',', "after the source")) return false;
    // ops
    if (Peek() == '*') {
      ++pos_;
      p->ops = kAllOpClasses;
    } else {
      p->ops = 0;
      for (;;) {
        size_t op_start = pos_;
        std::string_view op =
            TakeWhile([](char c) { return c >= 'a' && c <= 'z'; });
        OpClassMask m = 0;
        if (op == "r" || op == "read")
          m = kOpClassRead;
        else if (op == "w" || op == "write")
          m = kOpClassWrite;
        else if (op == "c" || op == "create")
          m = kOpClassCreate;
        else if (op == "d" || op == "delete")
          m = kOpClassDelete;
        if (m == 0) {
          return Fail(op_start, op.empty() ? "expected an op: '*', r, w, c or d"
                                           : StrCat("unknown op '", op,
                                                    "' (use r, w, c, d or *)"));
        }
        p->ops |= m;
        SkipWs();
        if (Peek() != '|') break;
        ++pos_;
        SkipWs();
      }
    }
    if (!Expect(',', "after the ops")) return false;
    if (!ParseFilePattern(&p->file)) return false;
    SkipWs();
    if (Peek() != '>') return Fail(pos_, "expected '>' to close the header");
    ++pos_;
    return true;
  }

  bool ParseDelegate(DelegateSpec* d) {
    d->name = std::string(TakeWhile(IsNameChar));
    if (Peek() != '(') {
      return Fail(pos_, "expected '(' after the delegate name");
    }
    ++pos_;
    SkipWs();
    if (Peek() == ')') {
      ++pos_;
      return true;
    }
    for (;;) {
      DelegateArg arg;
      size_t start = pos_;
      if (Peek() == '"') {
        if (!ParseQuoted(&arg.value)) return false;
      } else {
        std::string_view tok = TakeWhile(IsValueChar);
        if (tok.empty()) return Fail(start, "expected a delegate argument");
        SkipWs();
        if (Peek() == '=') {
          ++pos_;
          SkipWs();
          arg.key = std::string(tok);
          if (Peek() == '"') {
            if (!ParseQuoted(&arg.value)) return false;
          } else {
            std::string_view v = TakeWhile(IsValueChar);
            if (v.empty()) {
              return Fail(pos_, StrCat("expected a value for '", tok, "'"));
            }
            arg.value = std::string(v);
          }
        } else {
          arg.value = std::string(tok);
        }
      }
      d->args.push_back(std::move(arg));
      SkipWs();
      if (Peek() == ',') {
        ++pos_;
        SkipWs();
        continue;
      }
      if (Peek() == ')') {
        ++pos_;
        return true;
      }
      return Fail(pos_, "expected ',' or ')' in the delegate's arguments");
    }
  }

  bool ParseTarget(Target* t) {
    if (Consume("controller")) {
      if (IsNameChar(Peek())) return Fail(pos_, "unknown target");
      t->kind = Target::Kind::kController;
      return true;
    }
    if (Consume("stage://")) {
      t->kind = Target::Kind::kStage;
      std::string_view host = TakeWhile(IsHostChar);
      if (host.empty()) return Fail(pos_, "expected a host after 'stage://'");
      if (Peek() != '/')
        return Fail(pos_, "expected '/' after the stage's host");
      ++pos_;
      std::string_view name = TakeWhile(IsNameChar);
      if (name.empty()) return Fail(pos_, "expected a stage name");
      t->stage_host = std::string(host);
      t->stage = std::string(name);
      return true;
    }
    if (Consume("stage:")) {
      t->kind = Target::Kind::kStage;
      std::string_view name = TakeWhile(IsNameChar);
      if (name.empty())
        return Fail(pos_, "expected a stage name after 'stage:'");
      t->stage = std::string(name);
      return true;
    }
    if (Peek() != '/') {
      return Fail(pos_,
                  "expected a target: //HOST/PATH, stage:NAME, "
                  "stage://HOST/NAME or controller");
    }
    t->kind = Target::Kind::kFile;
    bool star = false;
    if (!ParseFileName(&t->file, &star)) return false;
    if (star) t->file.push_back('*');
    return true;
  }

  bool ParseDetour(Detour* d, size_t* target_pos) {
    if (Peek() != '<')
      return Fail(pos_, "expected a detour '<IO|IOHeader|F, target>'");
    ++pos_;
    SkipWs();
    size_t what_start = pos_;
    std::string_view what = TakeWhile(IsNameChar);
    if (what == "IO")
      d->what = Detour::What::kIo;
    else if (what == "IOHeader")
      d->what = Detour::What::kHeader;
    else if (what == "F")
      d->what = Detour::What::kF;
    else {
      return Fail(what_start, what.empty()
                                  ? "expected IO, IOHeader or F"
                                  : StrCat("unknown detour kind '", what,
                                           "' (use IO, IOHeader or F)"));
    }
    if (!Expect(',', "after the detour kind")) return false;
    *target_pos = pos_;
    if (!ParseTarget(&d->target)) return false;
    SkipWs();
    if (Peek() != '>') return Fail(pos_, "expected '>' to close the detour");
    ++pos_;
    return true;
  }

  // The checks across parts (rules/validate.h), at the detour at fault or
  // at the first detour.
  bool Validate(const Rule& r, size_t first_detour,
                const std::vector<size_t>& target_pos) {
    std::optional<RuleFault> fault = CrossPartFault(r);
    if (!fault) return true;
    return Fail(fault->detour < 0 ? first_detour : target_pos[fault->detour],
                std::move(fault->reason));
  }

  std::string_view s_;
  size_t pos_ = 0;
  ParseError error_;
};

}  // namespace

ParsedRules ParseRules(std::string_view text) {
  ParsedRules out;
  int line_no = 0;
  for (std::string_view line : StrSplit(text, '\n')) {
    ++line_no;
    LineParser p(line);
    p.SkipWs();
    if (p.AtEndOrComment()) continue;
    Rule rule;
    if (p.ParseRuleLine(&rule)) {
      out.rules.push_back(std::move(rule));
      out.lines.push_back(line_no);
    } else {
      ParseError e = p.error();
      e.line = line_no;
      out.errors.push_back(std::move(e));
    }
  }
  return out;
}

absl::StatusOr<Rule> ParseRule(std::string_view text) {
  if (text.find('\n') != std::string_view::npos) {
    return absl::InvalidArgumentError("a rule must fit on one line");
  }
  LineParser p(text);
  Rule rule;
  if (!p.ParseRuleLine(&rule)) {
    return absl::InvalidArgumentError(
        StrCat(p.error().column, ": ", p.error().reason));
  }
  return rule;
}

absl::StatusOr<HeaderPattern> ParsePattern(std::string_view text) {
  LineParser p(text);
  HeaderPattern pattern;
  if (!p.ParsePatternOnly(&pattern)) {
    return absl::InvalidArgumentError(
        StrCat(p.error().column, ": ", p.error().reason));
  }
  return pattern;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr struct {
    int shift;
    char unit;
  } kUnits[] = {{40, 'T'}, {30, 'G'}, {20, 'M'}, {10, 'K'}};
  if (bytes != 0) {
    for (const auto& u : kUnits) {
      const uint64_t mask = (uint64_t{1} << u.shift) - 1;
      if ((bytes & mask) == 0) {
        return StrCat(bytes >> u.shift, std::string(1, u.unit));
      }
    }
  }
  return StrCat(bytes);
}

namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (!IsValueChar(c)) return true;
  }
  return false;
}

}  // namespace

std::string FormatPattern(const HeaderPattern& p) {
  std::string out = "<";
  switch (p.source.kind) {
    case SourcePattern::Kind::kAny:
      out += "*";
      break;
    case SourcePattern::Kind::kTenant:
      out += p.source.name;
      break;
    case SourcePattern::Kind::kStage:
      StrAppend(&out, "stage:", p.source.name);
      break;
  }
  out += ", ";
  if (p.ops == kAllOpClasses) {
    out += "*";
  } else {
    static constexpr struct {
      OpClassMask bit;
      const char* name;
    } kOps[] = {{kOpClassRead, "r"},
                {kOpClassWrite, "w"},
                {kOpClassCreate, "c"},
                {kOpClassDelete, "d"}};
    bool first = true;
    for (const auto& op : kOps) {
      if (p.ops & op.bit) {
        if (!first) out += "|";
        out += op.name;
        first = false;
      }
    }
  }
  out += ", ";
  const FilePattern& f = p.file;
  switch (f.kind) {
    case FilePattern::Kind::kAny:
      out += "*";
      break;
    case FilePattern::Kind::kExact:
      out += f.text;
      break;
    case FilePattern::Kind::kPrefix:
      StrAppend(&out, f.text, "*");
      break;
    case FilePattern::Kind::kRegex: {
      bool plain =
          !f.text.empty() && f.text[0] != '"' && !f.text.ends_with(']');
      for (char c : f.text) {
        if (c == '>' || c == ' ' || c == '\t' || c == ',') plain = false;
      }
      StrAppend(&out, "re:", plain ? f.text : Quote(f.text));
      break;
    }
  }
  if (f.range) {
    StrAppend(&out, "[", FormatSize(f.range->start), ":",
              FormatSize(f.range->end), "]");
  }
  out += ">";
  return out;
}

std::string FormatTarget(const Target& t) {
  switch (t.kind) {
    case Target::Kind::kFile:
      return t.file;
    case Target::Kind::kController:
      return "controller";
    case Target::Kind::kStage:
      return t.stage_host.empty()
                 ? StrCat("stage:", t.stage)
                 : StrCat("stage://", t.stage_host, "/", t.stage);
  }
  return "";
}

std::string FormatRule(const Rule& r) {
  std::string out;
  if (r.priority != 0) StrAppend(&out, "@", r.priority, " ");
  StrAppend(&out, FormatPattern(r.pattern), " -> ");
  if (r.delegate) {
    StrAppend(&out, r.delegate->name, "(");
    for (size_t i = 0; i < r.delegate->args.size(); ++i) {
      const DelegateArg& a = r.delegate->args[i];
      if (i) out += ", ";
      if (!a.key.empty()) StrAppend(&out, a.key, "=");
      out += NeedsQuotes(a.value) ? Quote(a.value) : a.value;
    }
    out += r.detours.empty() ? ")" : "); ";
  }
  for (size_t i = 0; i < r.detours.size(); ++i) {
    const Detour& d = r.detours[i];
    if (i) out += ", ";
    const char* what = d.what == Detour::What::kIo       ? "IO"
                       : d.what == Detour::What::kHeader ? "IOHeader"
                                                         : "F";
    StrAppend(&out, "<", what, ", ", FormatTarget(d.target), ">");
  }
  if (r.ack != 0) StrAppend(&out, " ack=", r.ack);
  return out;
}

}  // namespace sroute
