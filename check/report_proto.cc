// SPDX-License-Identifier: Apache-2.0
#include "check/report_proto.h"

namespace sroute::check {

proto::CheckResult ToProto(const Report& report) {
  proto::CheckResult out;
  out.set_report(report.Text());
  out.set_errors(static_cast<uint32_t>(report.errors()));
  out.set_warnings(static_cast<uint32_t>(report.warnings()));
  for (const Finding& f : report.findings) {
    proto::CheckFinding* p = out.add_findings();
    p->set_kind(std::string(KindName(f.kind)));
    p->set_error(f.error());
    p->set_sswitch(f.sswitch);
    p->set_rule(f.rule);
    p->set_origin(f.origin);
    p->set_detail(f.detail);
    if (f.witness) p->set_witness(FormatWitness(*f.witness));
    for (const std::string& hop : f.path) p->add_path(hop);
  }
  return out;
}

}  // namespace sroute::check
