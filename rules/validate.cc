// SPDX-License-Identifier: Apache-2.0
#include "rules/validate.h"

#include "re2/re2.h"
#include "util/strings.h"

namespace sroute {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

bool IsPathChar(char c) {
  switch (c) {
    case ' ':
    case '\t':
    case '\r':
    case '\n':
    case ',':
    case '<':
    case '>':
    case '[':
    case ']':
    case '*':
    case '"':
    case '#':
      return false;
    default:
      return static_cast<unsigned char>(c) >= 0x20;
  }
}

bool IsValueChar(char c) {
  return IsNameChar(c) || c == ':' || c == '+' || c == '/';
}

std::optional<TextFault> PathFault(std::string_view path, bool prefix) {
  // Before a '*' the last component is only the start of a name.
  if (prefix) path = path.substr(0, path.rfind('/') + 1);
  if (path.empty()) return std::nullopt;
  size_t off = 0;
  for (std::string_view comp : StrSplit(path, '/')) {
    if (comp.empty() && off + comp.size() < path.size()) {
      return TextFault{off, "empty path component ('//')"};
    }
    if (comp == "." || comp == "..") {
      return TextFault{off,
                       StrCat("path component '", comp, "' is not allowed")};
    }
    off += comp.size() + 1;
  }
  return std::nullopt;
}

std::string RegexFault(std::string_view re) {
  if (re.empty()) return "empty regular expression";
  RE2 compiled(re, RE2::Quiet);
  if (!compiled.ok()) {
    return StrCat("bad regular expression: ", compiled.error());
  }
  return "";
}

std::optional<RuleFault> CrossPartFault(const Rule& r) {
  if (r.detours.empty()) {
    if (!r.delegate) return RuleFault{-1, "a rule needs a delegate or detours"};
    if (!IsTapDelegate(r.delegate->name)) {
      return RuleFault{-1, StrCat("a rule without detours is a tap, and only "
                                  "trace(...) can be one; '",
                                  r.delegate->name, "' needs ';' and detours")};
    }
  }
  size_t io_detours = 0;
  for (size_t i = 0; i < r.detours.size(); ++i) {
    const Detour& d = r.detours[i];
    const int at = static_cast<int>(i);
    if (d.what == Detour::What::kIo) ++io_detours;
    if (d.target.keeps_suffix() &&
        r.pattern.file.kind == FilePattern::Kind::kExact) {
      return RuleFault{at,
                       "a target ending in '*' needs a pattern that matches "
                       "many files ('*', a prefix or a regex)"};
    }
    if (d.what != Detour::What::kIo && d.target.kind == Target::Kind::kFile) {
      return RuleFault{
          at, "IOHeader and F detours go to the controller or a stage"};
    }
    if (d.what == Detour::What::kF && !r.delegate) {
      return RuleFault{at, "an F detour needs a delegate"};
    }
  }
  if (r.ack > 0 && r.ack > io_detours) {
    return RuleFault{-1, StrCat("ack=", r.ack, " but the rule has only ",
                                io_detours, " IO detour(s)")};
  }
  return std::nullopt;
}

namespace {

bool AllOf(std::string_view s, bool (*pred)(char)) {
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsTenantChar(char c) { return IsNameChar(c) || c == ':'; }

absl::Status Invalid(std::string_view part, std::string_view reason) {
  return absl::InvalidArgumentError(StrCat(part, ": ", reason));
}

// `name` as a name of the language (non-empty, name characters).
absl::Status CheckName(std::string_view part, std::string_view name,
                       bool (*pred)(char) = IsNameChar) {
  if (name.empty()) return Invalid(part, "empty name");
  if (!AllOf(name, pred)) {
    return Invalid(part, StrCat("'", name, "' is not a name"));
  }
  return absl::OkStatus();
}

// "//HOST/PATH", with `prefix` the part before a '*'.
absl::Status CheckFileName(std::string_view part, std::string_view file,
                           bool prefix) {
  if (!file.starts_with("//")) {
    return Invalid(part, StrCat("'", file, "' is not a file '//HOST/PATH'"));
  }
  const size_t slash = file.find('/', 2);
  if (slash == std::string_view::npos) {
    return Invalid(part, StrCat("'", file, "' has no '/' after the host"));
  }
  if (absl::Status s = CheckName(part, file.substr(2, slash - 2)); !s.ok()) {
    return s;
  }
  const std::string_view path = file.substr(slash + 1);
  if (!AllOf(path, IsPathChar)) {
    return Invalid(part, StrCat("'", file,
                                "' holds a character a path "
                                "cannot (space, ',<>[]*\"#' or a control)"));
  }
  if (auto f = PathFault(path, prefix)) return Invalid(part, f->reason);
  return absl::OkStatus();
}

absl::Status CheckPattern(const HeaderPattern& p) {
  switch (p.source.kind) {
    case SourcePattern::Kind::kAny:
      if (!p.source.name.empty()) {
        return Invalid("source", "'*' takes no name");
      }
      break;
    case SourcePattern::Kind::kTenant:
      if (absl::Status s = CheckName("source", p.source.name, IsTenantChar);
          !s.ok()) {
        return s;
      }
      if (p.source.name.starts_with("stage:")) {
        return Invalid("source", "a tenant cannot be named stage:...");
      }
      break;
    case SourcePattern::Kind::kStage:
      if (absl::Status s = CheckName("source", p.source.name); !s.ok()) {
        return s;
      }
      break;
  }
  if (p.ops == 0 || (p.ops & ~kAllOpClasses) != 0) {
    return Invalid("ops", "not a set of r, w, c and d");
  }
  const FilePattern& f = p.file;
  switch (f.kind) {
    case FilePattern::Kind::kAny:
      if (!f.text.empty()) return Invalid("file", "'*' takes no text");
      if (f.range) {
        return Invalid("file",
                       "a byte range needs a file; '*' matches every "
                       "file");
      }
      break;
    case FilePattern::Kind::kExact:
    case FilePattern::Kind::kPrefix:
      if (absl::Status s = CheckFileName("file", f.text,
                                         f.kind == FilePattern::Kind::kPrefix);
          !s.ok()) {
        return s;
      }
      break;
    case FilePattern::Kind::kRegex:
      if (f.text.find('\n') != std::string::npos) {
        return Invalid("file", "a regular expression on more than one line");
      }
      if (std::string why = RegexFault(f.text); !why.empty()) {
        return Invalid("file", why);
      }
      break;
  }
  if (f.range && f.range->end <= f.range->start) {
    return Invalid("file", "empty byte range: the end must be above the start");
  }
  return absl::OkStatus();
}

absl::Status CheckDelegate(const DelegateSpec& d) {
  if (absl::Status s = CheckName("delegate", d.name); !s.ok()) return s;
  for (const DelegateArg& a : d.args) {
    if (!a.key.empty() && !AllOf(a.key, IsValueChar)) {
      return Invalid("delegate",
                     StrCat("'", a.key, "' is not an argument's name"));
    }
    if (a.value.find('\n') != std::string::npos) {
      return Invalid("delegate", "an argument on more than one line");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTarget(const std::string& part, const Target& t) {
  switch (t.kind) {
    case Target::Kind::kController:
      if (!t.file.empty() || !t.stage.empty() || !t.stage_host.empty()) {
        return Invalid(part, "the controller takes no file or stage");
      }
      return absl::OkStatus();
    case Target::Kind::kStage:
      if (!t.file.empty()) return Invalid(part, "a stage takes no file");
      if (!t.stage_host.empty()) {
        if (absl::Status s = CheckName(part, t.stage_host); !s.ok()) return s;
      }
      return CheckName(part, t.stage);
    case Target::Kind::kFile: {
      if (!t.stage.empty() || !t.stage_host.empty()) {
        return Invalid(part, "a file takes no stage");
      }
      const bool star = t.keeps_suffix();
      return CheckFileName(
          part, std::string_view(t.file).substr(0, t.file.size() - star), star);
    }
  }
  return Invalid(part, "unknown target kind");
}

}  // namespace

absl::Status ValidateRule(const Rule& rule) {
  if (absl::Status s = CheckPattern(rule.pattern); !s.ok()) return s;
  if (rule.delegate) {
    if (absl::Status s = CheckDelegate(*rule.delegate); !s.ok()) return s;
  }
  for (size_t i = 0; i < rule.detours.size(); ++i) {
    if (absl::Status s =
            CheckTarget(StrCat("detour ", i + 1), rule.detours[i].target);
        !s.ok()) {
      return s;
    }
  }
  if (rule.ack > kMaxAck) {
    return Invalid("ack", StrCat("at most ", kMaxAck));
  }
  if (auto f = CrossPartFault(rule)) {
    return f->detour < 0 ? absl::InvalidArgumentError(f->reason)
                         : Invalid(StrCat("detour ", f->detour + 1), f->reason);
  }
  return absl::OkStatus();
}

}  // namespace sroute
