// SPDX-License-Identifier: Apache-2.0
// Replays the RPC decoder fuzz corpus (tests/fuzz/corpus/rpc_decoder) with
// the same checks as the fuzz target, so every seed and every past crash is
// a regression test in the ordinary test run (CI builds no fuzzers).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/rpc_decoder_check.h"

namespace sroute {
namespace {

std::string ReadFile(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(RpcDecoderFuzzCorpus, EveryInputPassesTheFuzzChecks) {
  const std::filesystem::path dir = std::filesystem::path(SROUTE_SOURCE_DIR) /
                                    "tests/fuzz/corpus/rpc_decoder";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  ASSERT_FALSE(files.empty()) << "empty corpus " << dir;
  // Count what the corpus reaches, so a corpus of nothing but garbage (or
  // a check that stopped looking) does not pass unnoticed.
  int frames = 0;
  int errors = 0;
  int decoded_ios = 0;
  for (const std::filesystem::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    const std::string input = ReadFile(file);
    EXPECT_EQ(fuzz_check::CheckRpcDecoderInput(input), "");
    size_t rest = 0;
    for (const fuzz_check::FrameEvent& e :
         fuzz_check::ReferenceFrames(input, fuzz_check::kFuzzLimits, &rest)) {
      if (e.error) {
        ++errors;
        continue;
      }
      ++frames;
      proto::RpcRequest req;
      Io io;
      if (req.ParseFromString(e.header) && req.has_io() &&
          DecodeIoRequest(req.io(), "S1", &io).ok()) {
        ++decoded_ios;
      }
    }
  }
  EXPECT_GT(frames, 30);
  EXPECT_GT(errors, 3);
  EXPECT_GT(decoded_ios, 10);
}

TEST(RpcDecoderFuzzCorpus, ReferenceFramesModelTheWireFormat) {
  // Two frames, then a prefix over the limits: the model the decoder is held
  // to must itself read the format right.
  proto::RpcRequest req;
  req.set_id(7);
  std::string wire;
  ASSERT_TRUE(AppendFrame(req, std::string("pay"), FrameLimits(), &wire).ok());
  ASSERT_TRUE(AppendFrame(req, {}, FrameLimits(), &wire).ok());
  size_t rest = 0;
  std::vector<fuzz_check::FrameEvent> frames = fuzz_check::ReferenceFrames(
      wire + std::string("\0\0", 2), fuzz_check::kFuzzLimits, &rest);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].header, req.SerializeAsString());
  EXPECT_EQ(frames[0].payload, "pay");
  EXPECT_TRUE(frames[1].payload.empty());
  EXPECT_EQ(rest, 2u);  // half a prefix waits for more
  frames =
      fuzz_check::ReferenceFrames(wire + std::string("\0\0\x10\x01\0\0\0\0", 8),
                                  fuzz_check::kFuzzLimits, &rest);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_TRUE(frames[2].error);
  frames = fuzz_check::ReferenceFrames(wire.substr(0, wire.size() - 1),
                                       fuzz_check::kFuzzLimits, &rest);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(rest, kFramePrefixBytes + req.ByteSizeLong() - 1);
  EXPECT_EQ(fuzz_check::CheckRpcDecoderInput(wire), "");
}

TEST(RpcDecoderFuzzCorpus, ChecksCatchBrokenInvariants) {
  // A reply that lost or changed results is reported, whichever kind of
  // result it is.
  Io want;
  want.header.op = Op::kRead;
  std::vector<char> data = {'a', 'b', 'c'};
  want.read_buffer = std::span<char>(data);
  want.bytes = 3;
  Io got;
  got.header.op = Op::kRead;
  got.bytes = 3;
  EXPECT_EQ(fuzz_check::CompareResults(want, got, {'a', 'b', 'c'}), "");
  EXPECT_NE(fuzz_check::CompareResults(want, got, {'a', 'b', 'x'}), "");
  got.bytes = 2;
  EXPECT_NE(fuzz_check::CompareResults(want, got, {'a', 'b', 'c'}), "");

  want.header.op = got.header.op = Op::kReaddir;
  want.bytes = got.bytes = 0;
  want.entries = {DirEntry{"a", 8, 1}, DirEntry{"b", 4, 2}};
  got.entries = want.entries;
  EXPECT_EQ(fuzz_check::CompareResults(want, got, {}), "");
  got.entries[1].ino = 3;
  EXPECT_NE(fuzz_check::CompareResults(want, got, {}), "");

  want.header.op = got.header.op = Op::kGetattr;
  want.attr.st_size = 10;
  EXPECT_NE(fuzz_check::CompareResults(want, got, {}), "");
  got.attr.st_size = 10;
  EXPECT_EQ(fuzz_check::CompareResults(want, got, {}), "");
  want.data = "x";
  EXPECT_NE(fuzz_check::CompareResults(want, got, {}), "");
}

TEST(RpcDecoderFuzzCorpus, NonUtf8NamesCrossTheWire) {
  // File names are bytes, not UTF-8: replies and records that carry them
  // must parse on the other side (the fuzzer found they did not).
  proto::RpcReply reply;
  reply.set_message("open //S1/caf\xe9: No such file or directory");
  reply.mutable_io()->set_target("//S1/caf\xe9");
  proto::RpcReply again;
  ASSERT_TRUE(again.ParseFromString(reply.SerializeAsString()));
  EXPECT_EQ(again.io().target(), "//S1/caf\xe9");
  proto::DelegateRecord record;
  record.set_rule("<*, r, //home/\xff[0:4K]> -> <IO, //S2/\xfe>");
  proto::DelegateRecord record_again;
  ASSERT_TRUE(record_again.ParseFromString(record.SerializeAsString()));
  EXPECT_EQ(record_again.rule(), record.rule());
}

}  // namespace
}  // namespace sroute
