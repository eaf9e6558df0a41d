// SPDX-License-Identifier: Apache-2.0
// The --json output of sroutectl and sroute-trace: every command prints one
// protobuf message, by ToJson, so that a script parses it back into that
// message (docs/reference/json.md names each command's). The messages are
// those of proto/cli_json.proto, or a wire message itself where it holds no
// text as `bytes` (AppList, AppInfo, StageStats, GcEvent); the functions
// below turn the wire messages that do into cli_json.proto's, text as string.
#ifndef SROUTE_TOOLS_SROUTECTL_JSON_OUTPUT_H_
#define SROUTE_TOOLS_SROUTECTL_JSON_OUTPUT_H_

#include <string>
#include <string_view>

#include "google/protobuf/message.h"
#include "proto/cli_json.pb.h"
#include "proto/controller.pb.h"
#include "proto/hostctl.pb.h"

namespace sroute::ctl {

// `m` in the protobuf JSON mapping on one line, then a newline: keys are
// the .proto field names; fields at their default (0, "", false, [], {})
// are printed too, `optional` fields only when set; 64-bit integers are
// strings, enums their names.
std::string ToJson(const google::protobuf::Message& m);

// `bytes` as UTF-8, for a string field (the JSON printer mangles what is
// not): each byte that starts no valid sequence becomes U+FFFD. The
// functions below pass every text of a bytes field through it.
std::string Utf8Text(std::string_view bytes);

// A host's rule record, and a rule at the controller (latencies in
// microseconds there, in nanoseconds here).
proto::CtlRule CtlRuleOf(const proto::RuleRecord& r);
proto::CtlRule CtlRuleOf(const proto::AdminRule& a);

proto::CtlHost CtlHostOf(const proto::HostStatus& h);
proto::CtlTrace CtlTraceOf(const proto::TraceRecord& t);
// The slow-op fields of a slow_ops answer.
proto::CtlSlowOps CtlSlowOpsOf(const proto::ControlResponse& resp);
proto::CtlRecord CtlRecordOf(const proto::DelegateRecord& r);
proto::CtlCheck CtlCheckOf(const proto::CheckResult& r);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_JSON_OUTPUT_H_
