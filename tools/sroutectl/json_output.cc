// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/json_output.h"

#include <cstdint>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace sroute::ctl {
namespace {

constexpr char kTypeUrlPrefix[] = "type.googleapis.com";

}  // namespace

std::string Utf8Text(std::string_view bytes) {
  static constexpr uint32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto byte = [&](size_t k) {
      return static_cast<unsigned char>(bytes[i + k]);
    };
    const unsigned char c = byte(0);
    const size_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x06 ? 2
                     : (c >> 4) == 0x0e ? 3
                     : (c >> 3) == 0x1e ? 4
                                        : 0;
    bool ok = n != 0 && i + n <= bytes.size();
    uint32_t code = n > 1 ? c & (0x7f >> n) : c;
    for (size_t k = 1; ok && k < n; ++k) {
      ok = (byte(k) & 0xc0) == 0x80;
      code = code << 6 | (byte(k) & 0x3f);
    }
    // No overlong forms, surrogates or code points past U+10FFFF.
    ok = ok && code >= kLeast[n] && code <= 0x10ffff &&
         (code < 0xd800 || code > 0xdfff);
    if (ok) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    }
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  namespace pb = google::protobuf;
  static pb::util::TypeResolver* const resolver =
      pb::util::NewTypeResolverForDescriptorPool(
          kTypeUrlPrefix, pb::DescriptorPool::generated_pool());
  // Map entries in key order: the same state prints the same text.
  std::string binary;
  {
    pb::io::StringOutputStream out(&binary);
    pb::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  // Fails only for a message the mapping cannot print (an Any of a type
  // not linked in); ours hold none.
  (void)pb::util::BinaryToJsonString(
      resolver,
      std::string(kTypeUrlPrefix) + "/" + m.GetDescriptor()->full_name(),
      binary, &json, options);
  return json + "\n";
}

proto::CtlRule CtlRuleOf(const proto::RuleRecord& r) {
  proto::CtlRule c;
  c.set_id(r.id());
  c.set_rule(Utf8Text(r.text()));
  c.set_owner(Utf8Text(r.owner()));
  c.set_ops(r.ops());
  c.set_bytes(r.bytes());
  c.set_in_flight(r.in_flight());
  c.set_errors(r.errors());
  c.set_p50_ns(r.p50_ns());
  c.set_p99_ns(r.p99_ns());
  c.set_p999_ns(r.p999_ns());
  return c;
}

proto::CtlRule CtlRuleOf(const proto::AdminRule& a) {
  proto::CtlRule c;
  c.set_sswitch(Utf8Text(a.sswitch()));
  c.set_cid(a.rule().cid());
  c.set_id(a.host_id());
  c.set_rule(Utf8Text(a.rule().text()));
  c.set_owner(Utf8Text(a.rule().owner()));
  c.set_ops(a.reads() + a.writes() + a.others());
  c.set_bytes(a.read_bytes() + a.write_bytes());
  c.set_in_flight(a.in_flight());
  c.set_errors(a.errors());
  c.set_p50_ns(a.p50_us() * 1000);
  c.set_p99_ns(a.p99_us() * 1000);
  c.set_reads(a.reads());
  c.set_writes(a.writes());
  c.set_others(a.others());
  c.set_read_bytes(a.read_bytes());
  c.set_write_bytes(a.write_bytes());
  return c;
}

proto::CtlHost CtlHostOf(const proto::HostStatus& h) {
  proto::CtlHost c;
  c.set_sswitch(Utf8Text(h.host().sswitch()));
  c.set_role(Utf8Text(h.host().role()));
  c.set_address(Utf8Text(h.host().address()));
  c.set_connected(h.connected());
  // A host with no session at the controller (not registered since it
  // started) is reported disconnected, last seen 0 ms ago.
  if (h.connected() || h.last_seen_ms_ago() != 0) {
    c.set_last_seen_ms_ago(h.last_seen_ms_ago());
  }
  c.set_version(h.version());
  c.set_rules(h.rules());
  for (const proto::EndpointInfo& e : h.host().endpoints()) {
    proto::CtlEndpoint* ep = c.add_endpoints();
    ep->set_name(Utf8Text(e.name()));
    ep->set_kind(Utf8Text(e.kind()));
    ep->set_address(Utf8Text(e.address()));
  }
  for (const std::string& s : h.host().stages()) c.add_stages(Utf8Text(s));
  return c;
}

proto::CtlTrace CtlTraceOf(const proto::TraceRecord& t) {
  proto::CtlTrace c;
  c.set_seq(t.seq());
  c.set_source(Utf8Text(t.source()));
  c.set_op(t.op());
  c.set_file(Utf8Text(t.file()));
  c.set_offset(t.offset());
  c.set_length(t.length());
  c.set_rule_id(t.rule_id());
  c.set_start_ns(t.start_ns());
  c.set_end_ns(t.end_ns());
  c.set_code(t.code());
  for (const proto::TraceHop& h : t.hops()) {
    proto::CtlHop* hop = c.add_hops();
    hop->set_host(Utf8Text(h.host()));
    hop->set_kind(h.kind());
    hop->set_rule_id(h.rule_id());
    hop->set_next(Utf8Text(h.next()));
    hop->set_start_ns(h.start_ns());
    hop->set_end_ns(h.end_ns());
    hop->set_depth(h.depth());
    hop->set_copy(h.copy());
    hop->set_code(h.code());
  }
  c.set_hops_dropped(t.hops_dropped());
  return c;
}

proto::CtlSlowOps CtlSlowOpsOf(const proto::ControlResponse& resp) {
  proto::CtlSlowOps c;
  for (const proto::TraceRecord& t : resp.slow_recent()) {
    *c.add_slow_recent() = CtlTraceOf(t);
  }
  for (const proto::TraceRecord& t : resp.slow_top()) {
    *c.add_slow_top() = CtlTraceOf(t);
  }
  c.set_slow_total(resp.slow_total());
  c.set_slow_overwritten(resp.slow_overwritten());
  c.set_slow_threshold_ns(resp.slow_threshold_ns());
  for (const proto::StaleIoRecord& s : resp.stale()) {
    proto::CtlStaleIo* io = c.add_stale();
    io->set_source(Utf8Text(s.source()));
    io->set_op(s.op());
    io->set_file(Utf8Text(s.file()));
    io->set_offset(s.offset());
    io->set_length(s.length());
    io->set_age_ns(s.age_ns());
    io->set_parked(s.parked());
    io->set_waiting_at(s.waiting_at());
  }
  return c;
}

proto::CtlRecord CtlRecordOf(const proto::DelegateRecord& r) {
  proto::CtlRecord c;
  c.set_sswitch(Utf8Text(r.sswitch()));
  c.set_seq(r.seq());
  c.set_rule(Utf8Text(r.rule()));
  c.set_anchor(Utf8Text(r.anchor()));
  return c;
}

proto::CtlCheck CtlCheckOf(const proto::CheckResult& r) {
  proto::CtlCheck c;
  c.set_report(Utf8Text(r.report()));
  c.set_errors(r.errors());
  c.set_warnings(r.warnings());
  for (const proto::CheckFinding& f : r.findings()) {
    proto::CtlFinding* out = c.add_findings();
    out->set_kind(f.kind());
    out->set_error(f.error());
    out->set_sswitch(Utf8Text(f.sswitch()));
    out->set_rule(Utf8Text(f.rule()));
    out->set_origin(Utf8Text(f.origin()));
    out->set_detail(Utf8Text(f.detail()));
    out->set_witness(Utf8Text(f.witness()));
    for (const std::string& p : f.path()) out->add_path(Utf8Text(p));
  }
  return c;
}

}  // namespace sroute::ctl
