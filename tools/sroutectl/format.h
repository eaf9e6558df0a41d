// SPDX-License-Identifier: Apache-2.0
// Text helpers of sroutectl: reading a rule file or stdin, printf into a
// string, column output. What every command and target shares (--json
// output is json_output.h's).
#ifndef SROUTE_TOOLS_SROUTECTL_FORMAT_H_
#define SROUTE_TOOLS_SROUTECTL_FORMAT_H_

#include <cstdint>
#include <string>
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

// Rows as columns two spaces apart, each padded to its widest cell but the
// last (rule texts and endpoint lists run long); a line per row.
std::string Table(const std::vector<std::vector<std::string>>& rows);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_FORMAT_H_
