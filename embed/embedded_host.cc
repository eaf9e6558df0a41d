// SPDX-License-Identifier: Apache-2.0
#include "embed/embedded_host.h"

#include <atomic>
#include <fstream>
#include <sstream>

#include "rules/parser.h"
#include "util/strings.h"

namespace sroute {

EmbeddedHost::EmbeddedHost(std::string name) : sswitch_(std::move(name)) {}
EmbeddedHost::~EmbeddedHost() = default;

absl::Status EmbeddedHost::AddLocalEndpoint(const std::string& name,
                                            const std::string& root) {
  auto ep = LocalEndpoint::Open(root);
  if (!ep.ok()) return ep.status();
  return sswitch_.AddEndpoint(name, std::move(*ep));
}

absl::Status EmbeddedHost::AddEndpoint(const std::string& name,
                                       std::shared_ptr<Endpoint> endpoint) {
  return sswitch_.AddEndpoint(name, std::move(endpoint));
}

absl::Status EmbeddedHost::AddStage(const std::string& name,
                                    std::shared_ptr<Stage> stage) {
  return sswitch_.AddStage(name, std::move(stage));
}

namespace {

// `text` parsed, or every parse error as ORIGIN:LINE:COL: reason.
absl::StatusOr<ParsedRules> ParseOrError(std::string_view text,
                                         std::string_view origin) {
  ParsedRules parsed = ParseRules(text);
  if (parsed.ok()) return parsed;
  std::string msg;
  for (const ParseError& e : parsed.errors) {
    StrAppend(&msg, msg.empty() ? "" : "\n", origin, ":", e.line, ":", e.column,
              ": ", e.reason);
  }
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<std::string> ReadRulesFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read rules file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::Status EmbeddedHost::LoadRules(std::string_view text,
                                     std::string_view origin,
                                     std::string owner) {
  absl::StatusOr<ParsedRules> parsed = ParseOrError(text, origin);
  if (!parsed.ok()) return parsed.status();
  // Install one by one to name the failing line, then roll back.
  std::vector<uint64_t> installed;
  for (size_t i = 0; i < parsed->rules.size(); ++i) {
    auto id = sswitch_.Insert(parsed->rules[i], owner);
    if (!id.ok()) {
      if (!installed.empty()) (void)sswitch_.Update({}, installed);
      return absl::Status(
          id.status().code(),
          StrCat(origin, ":", parsed->lines[i], ": ", id.status().message()));
    }
    installed.push_back(*id);
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> EmbeddedHost::ReloadRulesFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRulesFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<ParsedRules> parsed = ParseOrError(*text, path);
  if (!parsed.ok()) return parsed.status();
  const std::string owner = StrCat("file:", path);
  std::vector<uint64_t> old;
  for (const RuleInfo& r : sswitch_.ListRules()) {
    if (r.owner == owner) old.push_back(r.id);
  }
  const size_t n = parsed->rules.size();
  auto ids = sswitch_.Update(std::move(parsed->rules), old, owner);
  if (!ids.ok()) {
    return absl::Status(ids.status().code(),
                        StrCat(path, ": ", ids.status().message()));
  }
  return n;
}

absl::Status EmbeddedHost::LoadRulesFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRulesFile(path);
  if (!text.ok()) return text.status();
  return LoadRules(*text, path, StrCat("file:", path));
}

absl::Status EmbeddedHost::Submit(Io& io) {
  std::atomic<bool> done{false};
  io.set_completion([&done](Io&) {
    done.store(true, std::memory_order_release);
    done.notify_one();
  });
  sswitch_.Route(&io);
  done.wait(false, std::memory_order_acquire);
  return io.status;
}

absl::StatusOr<size_t> EmbeddedHost::Read(std::string_view source,
                                          std::string_view file,
                                          uint64_t offset,
                                          std::span<char> buffer) {
  Io io;
  io.header.source = std::string(source);
  io.header.op = Op::kRead;
  io.header.file = std::string(file);
  io.header.offset = offset;
  io.header.length = buffer.size();
  io.read_buffer = buffer;
  absl::Status s = Submit(io);
  if (!s.ok()) return s;
  return io.bytes;
}

absl::StatusOr<size_t> EmbeddedHost::Write(std::string_view source,
                                           std::string_view file,
                                           uint64_t offset,
                                           std::span<const char> data) {
  Io io;
  io.header.source = std::string(source);
  io.header.op = Op::kWrite;
  io.header.file = std::string(file);
  io.header.offset = offset;
  io.header.length = data.size();
  io.write_data = data;
  absl::Status s = Submit(io);
  if (!s.ok()) return s;
  return io.bytes;
}

absl::StatusOr<struct stat> EmbeddedHost::Call(std::string_view source, Op op,
                                               std::string_view file,
                                               IoArgs args) {
  Io io;
  io.header.source = std::string(source);
  io.header.op = op;
  io.header.file = std::string(file);
  io.args = std::move(args);
  absl::Status s = Submit(io);
  if (!s.ok()) return s;
  return io.attr;
}

}  // namespace sroute
