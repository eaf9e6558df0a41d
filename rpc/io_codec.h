// SPDX-License-Identifier: Apache-2.0
// Io <-> proto::IoRequest / RpcReply, for IOs that cross the network
// (RemoteEndpoint on the sending host, the storage server on the other).
#ifndef SROUTE_RPC_IO_CODEC_H_
#define SROUTE_RPC_IO_CODEC_H_

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "proto/rpc.pb.h"
#include "sswitch/io.h"

namespace sroute {

struct TraceHop;

// --- The sending side.

// The request for `io` on `path` (relative to the peer's root). Write data
// (and setxattr values) travel as the frame's payload: io.write_data.
void EncodeIoRequest(const Io& io, std::string_view path,
                     proto::IoRequest* out);
// Puts a reply's results into `io`: bytes, attributes, data, entries and
// read data (copied from `payload` into io.read_buffer). Returns the status
// to complete `io` with.
absl::Status DecodeIoReply(const proto::RpcReply& reply,
                           std::span<const char> payload, Io* io);

// --- The receiving side.

// Sets up `io` (header with file "//HOST/path", args, records) from `req`.
// InvalidArgument for an unknown op or a path that is absolute, empty where
// a name is needed, or holds NUL bytes.
absl::Status DecodeIoRequest(const proto::IoRequest& req,
                             const std::string& host, Io* io);
// The reply for a completed `io`; the read data to send with it is
// io.read_buffer's first io.bytes bytes (see ReadPayload). Takes the hops
// of its trace: nothing reads them after.
void EncodeIoReply(const Io& io, proto::RpcReply* out);

// A trace hop (sswitch/trace.h) on the wire, and back; `extra_depth` is
// added to the hop's depth.
void TraceHopToMsg(const TraceHop& hop, proto::TraceHop* out);
TraceHop TraceHopFromMsg(const proto::TraceHop& m, uint32_t extra_depth = 0);
std::span<const char> ReadPayload(const Io& io);

}  // namespace sroute

#endif  // SROUTE_RPC_IO_CODEC_H_
