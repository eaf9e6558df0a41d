// SPDX-License-Identifier: Apache-2.0
// A checker report as the control protocols carry it (proto CheckResult).
#ifndef SROUTE_CHECK_REPORT_PROTO_H_
#define SROUTE_CHECK_REPORT_PROTO_H_

#include "check/checker.h"
#include "proto/hostctl.pb.h"

namespace sroute::check {

proto::CheckResult ToProto(const Report& report);

}  // namespace sroute::check

#endif  // SROUTE_CHECK_REPORT_PROTO_H_
