// SPDX-License-Identifier: Apache-2.0
#include "sim/engine.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sroute::sim {
namespace {

TEST(EngineTest, EventsRunByTimeThenInTheOrderScheduled) {
  Engine e;
  std::vector<std::string> ran;
  e.At(30, [&] { ran.push_back("c@" + std::to_string(e.now_ns())); });
  e.At(10, [&] { ran.push_back("a@" + std::to_string(e.now_ns())); });
  e.At(10, [&] { ran.push_back("b@" + std::to_string(e.now_ns())); });
  e.At(20, [&] {
    ran.push_back("x@" + std::to_string(e.now_ns()));
    e.After(5, [&] { ran.push_back("y@" + std::to_string(e.now_ns())); });
    e.At(0, [&] { ran.push_back("past@" + std::to_string(e.now_ns())); });
  });
  e.Run();
  EXPECT_EQ(ran, (std::vector<std::string>{"a@10", "b@10", "x@20", "past@20",
                                           "y@25", "c@30"}));
  EXPECT_EQ(e.events_run(), 6u);
  EXPECT_EQ(e.pending(), 0u);
}

TEST(EngineTest, RunStopsAtItsTimeAndResumes) {
  Engine e;
  int ran = 0;
  e.At(100, [&] { ++ran; });
  e.At(300, [&] { ++ran; });
  e.Run(200);
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(e.now_ns(), 200u);
  EXPECT_EQ(e.pending(), 1u);
  e.Run();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(e.now_ns(), 300u);
}

TEST(EngineTest, EveryRepeatsUntilItsEnd) {
  Engine e;
  std::vector<uint64_t> at;
  e.Every(
      200, [&] { at.push_back(e.now_ns()); }, 1'000);
  e.At(500, [&] { at.push_back(1); });
  e.Run();
  EXPECT_EQ(at, (std::vector<uint64_t>{200, 400, 1, 600, 800, 1'000}));
}

}  // namespace
}  // namespace sroute::sim
