// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what a peer can send: the RPC frame decoder and the
// messages in its frames. Whatever the bytes, decoding must not crash, must
// not depend on how the bytes are cut into reads, and every message that
// parses must survive re-encoding; IO requests must decode into IOs on this
// host whose replies cross the wire unchanged. See rpc_decoder_check.h.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/rpc_decoder_check.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Protobuf logs every non-UTF-8 string field it meets; fuzzed messages are
  // full of them, and the log would drown libFuzzer's own output.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string error = sroute::fuzz_check::CheckRpcDecoderInput(input);
  if (!error.empty()) {
    std::fprintf(stderr, "rpc_decoder_fuzz: %s\n", error.c_str());
    __builtin_trap();
  }
  return 0;
}
