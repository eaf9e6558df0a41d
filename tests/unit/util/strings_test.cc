// SPDX-License-Identifier: Apache-2.0
#include "util/strings.h"

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(XmlEscapeTest, EscapesWhatXmlReserves) {
  EXPECT_EQ(XmlEscape("<IO, //S1/a&b> \"x\" 'y'"),
            "&lt;IO, //S1/a&amp;b&gt; &quot;x&quot; &apos;y&apos;");
  EXPECT_EQ(XmlEscape("plain"), "plain");
  EXPECT_EQ(XmlEscape(""), "");
}

}  // namespace
}  // namespace sroute
