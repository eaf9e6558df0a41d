// SPDX-License-Identifier: Apache-2.0
// The --json printer that sroutectl and sroute-trace share
// (tools/sroutectl/json_output.h): the options docs/reference/json.md
// promises, and text that is not UTF-8.
#include "tools/sroutectl/json_output.h"

#include <string>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace sroute::ctl {
namespace {

TEST(JsonOutputTest, OneLineFieldNamesZerosAndOptionalsAsDocumented) {
  proto::CtlRule host_rule;  // as from a host: no sswitch, no cid
  host_rule.set_id(7);
  host_rule.set_rule("<*, r, //home/a> -> <IO, //x/a>");
  host_rule.set_p999_ns(0);
  proto::CtlRules rules;
  *rules.add_rules() = host_rule;
  const std::string json = ToJson(rules);
  EXPECT_EQ(json.find('\n'), json.size() - 1) << json;
  EXPECT_NE(json.find("\"in_flight\":\"0\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"id\":\"7\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"owner\":\"\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"p999_ns\":\"0\""), std::string::npos) << json;
  EXPECT_EQ(json.find("sswitch"), std::string::npos) << json;
  EXPECT_EQ(json.find("cid"), std::string::npos) << json;
  // It parses back into the message, unset optionals still unset.
  proto::CtlRules back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  ASSERT_EQ(back.rules_size(), 1);
  EXPECT_EQ(back.rules(0).rule(), host_rule.rule());
  EXPECT_FALSE(back.rules(0).has_sswitch());
  EXPECT_TRUE(back.rules(0).has_p999_ns());
}

TEST(JsonOutputTest, MapsInKeyOrder) {
  proto::CtlHostStats stats;
  for (const char* name : {"zeta", "alpha", "mu", "beta"}) {
    (*stats.mutable_gauges())[name] = 1;
  }
  const std::string json = ToJson(stats);
  EXPECT_NE(
      json.find(R"("gauges":{"alpha":"1","beta":"1","mu":"1","zeta":"1"})"),
      std::string::npos)
      << json;
}

TEST(JsonOutputTest, TextThatIsNotUtf8) {
  EXPECT_EQ(Utf8Text("plain //home/é"), "plain //home/é");
  EXPECT_EQ(Utf8Text("a\xff"
                     "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(Utf8Text("\xc3"), "\xef\xbf\xbd");                  // cut short
  EXPECT_EQ(Utf8Text("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
  EXPECT_EQ(Utf8Text("\xed\xa0\x80"),                           // a surrogate
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(Utf8Text("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");  // U+1F600
  proto::TraceRecord t;
  t.set_file(
      std::string("//home/a\xff"
                  "b"));
  proto::CtlTraces traces;
  *traces.add_traces() = CtlTraceOf(t);
  proto::CtlTraces back;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ToJson(traces), &back).ok());
  EXPECT_EQ(back.traces(0).file(),
            "//home/a\xef\xbf\xbd"
            "b");
}

}  // namespace
}  // namespace sroute::ctl
