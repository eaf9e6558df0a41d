// SPDX-License-Identifier: Apache-2.0
// What sroutectl and sroute-trace print with --json, parsed back into the
// message docs/reference/json.md names for the command, as a script
// would: strictly (a key the message lacks fails), with
// google::protobuf::util::JsonStringToMessage.
#ifndef SROUTE_TESTS_UTIL_CTL_JSON_H_
#define SROUTE_TESTS_UTIL_CTL_JSON_H_

#include <sstream>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace sroute::testing {

// The message M of `doc`, one JSON document; a failure of the test (and an
// empty M) if it is not one.
template <typename M>
M ParseJson(const std::string& doc) {
  M m;
  const auto status = google::protobuf::util::JsonStringToMessage(doc, &m);
  if (!status.ok()) {
    ADD_FAILURE() << "not a " << M::descriptor()->full_name() << ": "
                  << status.ToString() << "\n"
                  << doc;
  }
  return m;
}

// `out`, all a command printed, as message M: exactly one JSON document
// on one line, then a newline.
template <typename M>
M FromJson(const std::string& out) {
  const size_t nl = out.find('\n');
  if (out.empty() || out[0] != '{' || nl + 1 != out.size()) {
    ADD_FAILURE() << "not one JSON document on one line:\n" << out;
    return M();
  }
  return ParseJson<M>(out.substr(0, nl));
}

// The one line of `out` that is a JSON document, as message M: for a
// command whose notes on stderr come with it.
template <typename M>
M FromJsonLine(const std::string& out) {
  std::istringstream in(out);
  std::string doc;
  int docs = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '{') {
      doc = line;
      ++docs;
    }
  }
  if (docs != 1) {
    ADD_FAILURE() << docs << " JSON documents, not one:\n" << out;
    return M();
  }
  return ParseJson<M>(doc);
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_CTL_JSON_H_
