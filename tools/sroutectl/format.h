// Text helpers of sroutectl: reading a rule file or stdin, printf into a
// string, JSON and column output. What every command and target shares.
#ifndef SROUTE_TOOLS_SROUTECTL_FORMAT_H_
#define SROUTE_TOOLS_SROUTECTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sroute::ctl {

// Reads `path` ('-': stdin) into *out; on failure prints "cannot read" and
// returns false.
bool ReadInput(const std::string& path, std::string* out);

// printf into a string.
std::string Printf(const char* format, ...)
    __attribute__((format(printf, 1, 2)));

// A decimal rule id (a host's) or cid (the controller's), all of `s`.
bool ParseId(const std::string& s, uint64_t* id);

// `s` as a JSON string literal.
std::string JsonString(const std::string& s);

// A JSON object's members in order: each key with its value as JSON text
// (a number as std::to_string gives it, a string as JsonString does).
using JsonObject = std::vector<std::pair<std::string, std::string>>;

// {"key": value, "key": value} on one line.
std::string ToJson(const JsonObject& object);

// [value, value] on one line, each value JSON text already.
std::string JsonArray(const std::vector<std::string>& values);

// Objects one a line: "[\n  {...},\n  {...}\n]", or "[]" when there are
// none; no newline after the last bracket.
std::string JsonLines(const std::vector<JsonObject>& objects);

// Rows as columns two spaces apart, each padded to its widest cell but the
// last (rule texts and endpoint lists run long); a line per row.
std::string Table(const std::vector<std::vector<std::string>>& rows);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_FORMAT_H_
