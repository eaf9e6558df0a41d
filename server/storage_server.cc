// SPDX-License-Identifier: Apache-2.0
#include "server/storage_server.h"

#include <sys/stat.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <tuple>

#include "absl/hash/hash.h"
#include "endpoints/remote_endpoint.h"
#include "host/host_metrics.h"
#include "host/runtime.h"
#include "hostctl/control_handler.h"
#include "rpc/io_codec.h"
#include "rpc/io_threads.h"
#include "rpc/server.h"
#include "rules/parser.h"
#include "server/record_store.h"
#include "sswitch/namespace.h"
#include "util/background.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

// One IO from another host, from request to reply.
struct ServerIo {
  std::unique_ptr<RpcServer::Call> call;
  Io io;
  std::unique_ptr<char[]> read_data;
  // Change-stamp slots of the file (and a rename's other name) as the
  // request named them; -1: none.
  int32_t slot = -1;
  int32_t other_slot = -1;
  bool changes = false;  // bumps its slots again when it ends
};

// A stamp per file that changes whenever a change to it starts or ends on
// this server, sent with every open: a cache on another host compares it
// with the one of its last open (close-to-open) and so sees a change that
// kept the size and fell in the same timestamp tick. Files share slots by
// the hash of their name (a change to one changes its slot-mates' stamps
// too: a needless drop, never a missed change); the random base makes the
// stamps of an earlier run of the server differ from this one's.
class ChangeStamps {
 public:
  static constexpr int32_t kSlots = 4096;
  static int32_t SlotOf(std::string_view file) {
    return static_cast<int32_t>(absl::HashOf(file) % kSlots);
  }
  void Bump(int32_t slot) {
    if (slot >= 0) slots_[slot].fetch_add(1, std::memory_order_acq_rel);
  }
  uint64_t Of(int32_t slot) const {
    return base_ + slots_[slot].load(std::memory_order_acquire);
  }

 private:
  const uint64_t base_ = std::random_device()() * 0x9E3779B97F4A7C15ull;
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace

struct StorageServer::Impl {
  void Handle(std::unique_ptr<RpcServer::Call> call);
  void HandleIo(std::unique_ptr<RpcServer::Call> call);
  void FinishIo(ServerIo* sio);

  FrameLimits limits;
  ChangeStamps stamps;
  // Destruction order matters: the RPC server first (no new requests),
  // then background requests, then the host (its network threads last).
  std::unique_ptr<HostRuntime> runtime;
  std::unique_ptr<RecordStore> records;
  std::unique_ptr<Background> background;
  std::unique_ptr<RpcServer> rpc;
  SSwitch& sswitch() { return runtime->sswitch(); }
  // The root's endpoint name (the host's home).
  const std::string& name() const { return runtime->home_name(); }
  // Requests wait until the controller's rules are in place (queued, not
  // blocking an io thread: registering needs one).
  // A leaf lock, as is versions_mu.
  Mutex ready_mu;
  bool ready ABSL_GUARDED_BY(ready_mu) = false;
  std::vector<std::unique_ptr<RpcServer::Call>> early ABSL_GUARDED_BY(ready_mu);
  void SetReady();

  // Per-IO version stamps: how many IOs came routed by version V of the
  // sending sSwitch and went on by version W of this one.
  Mutex versions_mu;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, int64_t> versions
      ABSL_GUARDED_BY(versions_mu);
  void AddStats(proto::ControlResponse* resp);
};

void StorageServer::Impl::AddStats(proto::ControlResponse* resp) {
  MutexLock l(&versions_mu);
  for (const auto& [key, n] : versions) {
    const auto& [via, theirs, ours] = key;
    (*resp->mutable_gauges())[StrCat("io_version ", via, " ", theirs, " ",
                                     ours)] = n;
  }
}

void StorageServer::Impl::SetReady() {
  std::vector<std::unique_ptr<RpcServer::Call>> calls;
  {
    MutexLock l(&ready_mu);
    ready = true;
    calls.swap(early);
  }
  for (auto& c : calls) Handle(std::move(c));
}

void StorageServer::Impl::Handle(std::unique_ptr<RpcServer::Call> call) {
  // Listing records (and pings) need no rules: the records are those of
  // IOs already stored, and none is served before we are ready. Answering
  // them at once lets two servers that forward to each other register
  // together (each one's registration recovers its records from the other).
  const auto body = call->request().body_case();
  if (body != proto::RpcRequest::kListRecords &&
      body != proto::RpcRequest::kPing) {
    MutexLock l(&ready_mu);
    if (!ready) {
      early.push_back(std::move(call));
      return;
    }
  }
  proto::RpcRequest& req = call->request();
  switch (req.body_case()) {
    case proto::RpcRequest::kIo:
      HandleIo(std::move(call));
      return;
    case proto::RpcRequest::kControl:
      background->Run(
          [this, c = std::shared_ptr<RpcServer::Call>(std::move(call))] {
            bool changed = false;
            proto::RpcReply reply;
            *reply.mutable_control() = HandleControlRequest(
                sswitch(), c->request().control(),
                [this](proto::ControlResponse* r) { AddStats(r); }, &changed,
                ControlOrigin::kNetwork);
            if (changed) {
              LogInfo("rules changed by ", c->peer_name(), " (", c->peer_role(),
                      "): now version ", sswitch().version());
            }
            c->Reply(reply);
          });
      return;
    case proto::RpcRequest::kListRecords:
      background->Run(
          [this, c = std::shared_ptr<RpcServer::Call>(std::move(call))] {
            const proto::ListRecords& l = c->request().list_records();
            proto::RpcReply reply;
            absl::Status s = records->List(l.sswitch(), l.after(), l.limit(),
                                           reply.mutable_records());
            if (!s.ok()) {
              c->ReplyStatus(s);
              return;
            }
            c->Reply(reply);
          });
      return;
    case proto::RpcRequest::kForgetRecords: {
      const proto::ForgetRecords& f = req.forget_records();
      auto n = records->Forget(f.sswitch(), f.up_to(), f.anchor());
      if (!n.ok()) {
        call->ReplyStatus(n.status());
        return;
      }
      proto::RpcReply reply;
      reply.set_message(StrCat("forgot ", *n, " record", *n == 1 ? "" : "s"));
      call->Reply(reply);
      return;
    }
    case proto::RpcRequest::kPing:
      call->ReplyStatus(absl::OkStatus());
      return;
    case proto::RpcRequest::kController:
      call->ReplyStatus(absl::UnimplementedError(
          StrCat(name(), " is a storage server, not the controller")));
      return;
    case proto::RpcRequest::BODY_NOT_SET:
      call->ReplyStatus(absl::InvalidArgumentError("empty request"));
      return;
  }
  call->ReplyStatus(absl::InvalidArgumentError("unknown request"));
}

void StorageServer::Impl::HandleIo(std::unique_ptr<RpcServer::Call> call) {
  auto sio = std::make_unique<ServerIo>();
  ServerIo* s = sio.get();
  s->call = std::move(call);
  const proto::IoRequest& req = s->call->request().io();
  if (absl::Status st = DecodeIoRequest(req, name(), &s->io); !st.ok()) {
    s->io.status = st;
    proto::RpcReply reply;
    EncodeIoReply(s->io, &reply);
    s->call->Reply(reply);
    return;
  }
  Io& io = s->io;
  io.arrived_ns = s->call->received_ns();
  if (!io.records.empty()) {
    // Records come only with writes, renames and unlinks (which carry the
    // rules that route a name's bytes after them), and must be rules:
    // refuse anything else before the IO runs, so nothing lands that could
    // not be recorded.
    absl::Status bad;
    const Op op = io.header.op;
    if (op != Op::kWrite && op != Op::kRenameFrom && op != Op::kUnlink) {
      bad = absl::InvalidArgumentError(
          "delegate records come only with writes, renames and unlinks");
    }
    for (const DelegateRuleRecord& r : io.records) {
      if (!bad.ok()) break;
      auto rule = ParseRule(r.rule);
      if (!rule.ok()) {
        bad = absl::InvalidArgumentError(
            StrCat("bad delegate record: ", rule.status().message()));
      } else if (r.sswitch.empty() ||
                 r.sswitch.find('\0') != std::string::npos) {
        bad = absl::InvalidArgumentError("delegate record without sSwitch");
      }
    }
    if (!bad.ok()) {
      io.status = bad;
      proto::RpcReply reply;
      EncodeIoReply(io, &reply);
      s->call->Reply(reply);
      return;
    }
  }
  const Op op = io.header.op;
  if (ChangesFileBytes(io)) {
    s->changes = true;
    s->slot = ChangeStamps::SlotOf(io.header.file);
    if (op == Op::kRenameFrom || op == Op::kRenameTo) {
      s->other_slot = ChangeStamps::SlotOf(io.args.second_file);
    }
    stamps.Bump(s->slot);
    stamps.Bump(s->other_slot);
  } else if (op == Op::kOpen || op == Op::kCreate) {
    s->slot = ChangeStamps::SlotOf(io.header.file);
  }
  if (op == Op::kWrite || op == Op::kSetxattr) {
    io.write_data = std::span<const char>(s->call->payload());
  }
  if (op == Op::kRead) {
    const uint64_t want =
        std::min<uint64_t>(io.header.length, limits.max_payload);
    s->read_data = std::make_unique_for_overwrite<char[]>(want);
    io.read_buffer = std::span<char>(s->read_data.get(), want);
  }
  if (op == Op::kReaddir) {
    // The merged listing of every place this server's rules may send the
    // directory's children (sswitch/namespace.h).
    sio.release();
    ListDirectory(sswitch(), io.header, io.args,
                  [this, s](absl::Status st, std::vector<DirEntry> entries) {
                    s->io.status = std::move(st);
                    s->io.entries = std::move(entries);
                    FinishIo(s);
                  });
    return;
  }
  io.set_completion([this, s](Io&) { FinishIo(s); });
  sio.release();  // owned by the completion now
  if (!req.stage().empty()) {
    sswitch().RouteToStage(&io, req.stage());
    return;
  }
  sswitch().Route(&io);
}

void StorageServer::Impl::FinishIo(ServerIo* s) {
  std::unique_ptr<ServerIo> owned(s);
  Io& io = s->io;
  const proto::IoRequest& req = s->call->request().io();
  if (!req.via().empty() && io.routed_version() != 0) {
    MutexLock l(&versions_mu);
    auto key =
        std::make_tuple(req.via(), req.via_version(), io.routed_version());
    auto it = versions.find(key);
    if (it != versions.end()) {
      ++it->second;
    } else if (versions.size() < 4096) {
      versions.emplace(std::move(key), 1);
    }
  }
  if (io.status.ok() && !io.records.empty() &&
      (io.header.op == Op::kRenameFrom || io.header.op == Op::kUnlink ||
       (io.header.op == Op::kWrite && io.bytes > 0))) {
    if (io.header.op == Op::kWrite && io.bytes < io.header.length) {
      // A short write: the records cover only what landed.
      for (DelegateRuleRecord& r : io.records) {
        auto rule = ParseRule(r.rule);
        if (rule.ok() && rule->pattern.file.range) {
          rule->pattern.file.range->end = io.header.offset + io.bytes;
          r.rule = FormatRule(*rule);
        }
      }
    }
    // Acknowledge the write (or rename) only with its records stored: an
    // IO whose rule could be lost must not be reported done.
    if (absl::Status st = records->Put(io.records); !st.ok()) {
      LogError("write of ", io.header.file,
               " landed but its delegate records could not be stored: ",
               st.message());
      io.status = StatusWithErrno(
          st.code(),
          StrCat("the write landed but its delegate records could not be "
                 "stored: ",
                 st.message()),
          absl::IsResourceExhausted(st) ? ENOSPC : EIO);
    }
  }
  if (s->changes) {
    stamps.Bump(s->slot);
    stamps.Bump(s->other_slot);
  }
  proto::RpcReply reply;
  EncodeIoReply(io, &reply);
  if (io.status.ok() && s->slot >= 0 &&
      (io.header.op == Op::kOpen || io.header.op == Op::kCreate)) {
    reply.mutable_io()->set_change_stamp(stamps.Of(s->slot));
  }
  s->call->Reply(reply, ReadPayload(io));
}

absl::StatusOr<std::unique_ptr<StorageServer>> StorageServer::Start(
    const proto::HostConfig& config, StorageServerExtras extras) {
  auto impl = std::make_unique<Impl>();
  auto runtime =
      HostRuntime::Build(config, HostKind::kServer, std::move(extras.secret));
  if (!runtime.ok()) return runtime.status();
  impl->runtime = *std::move(runtime);
  impl->limits = extras.limits;
  const std::string& state_dir = impl->runtime->state_dir();
  auto store = RecordStore::Open(state_dir, impl->name());
  if (!store.ok()) return store.status();
  impl->records = *std::move(store);
  impl->background = std::make_unique<Background>();

  // Modes of new files arrive with the caller's umask applied (by the
  // volume's kernel), as the FUSE daemon takes them too; the server's own
  // files (above) are made before this.
  umask(0);

  RpcServer::Options ro;
  ro.name = impl->name();
  ro.secret = impl->runtime->secret();
  ro.limits = impl->limits;
  Impl* raw = impl.get();
  auto rpc = RpcServer::Start(
      impl->runtime->io_threads(),
      config.listen().empty() ? "127.0.0.1:7400" : config.listen(), ro,
      [raw](std::unique_ptr<RpcServer::Call> call) {
        raw->Handle(std::move(call));
      });
  if (!rpc.ok()) return rpc.status();
  impl->rpc = *std::move(rpc);
  if (absl::Status s = impl->runtime->StartAgent(impl->rpc->address());
      !s.ok()) {
    impl->SetReady();  // answer what waits, then stop
    return s;
  }
  if (absl::Status s = impl->runtime->StartControl(
          [raw](proto::ControlResponse* r) { raw->AddStats(r); });
      !s.ok()) {
    impl->SetReady();
    return s;
  }
  if (absl::Status s =
          impl->runtime->StartMetrics([raw](metrics::Exposition* e) {
            AddRpcServerMetrics(raw->rpc->counters(), e);
          });
      !s.ok()) {
    impl->SetReady();
    return s;
  }
  impl->SetReady();
  return std::unique_ptr<StorageServer>(new StorageServer(std::move(impl)));
}

StorageServer::StorageServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

StorageServer::~StorageServer() {
  impl_->runtime->StopServices();
  impl_->rpc.reset();         // no new requests
  impl_->background.reset();  // control requests finish
  SSwitch& sw = impl_->sswitch();
  if (!impl_->runtime->WaitForIdle(std::chrono::seconds(5))) {
    // IOs parked by a quiesce nobody lifts, or stuck downstream: the host
    // cannot go safely while they may complete, so it stays (the process
    // is ending anyway).
    LogWarning("stopping with ", sw.in_flight(), " IOs in flight and ",
               sw.parked(), " parked");
    (void)impl_.release();
    return;
  }
  // Write-back stages write back before the endpoints go.
  if (absl::Status s = impl_->runtime->StopStages(); !s.ok()) {
    LogError("stopping the stages: ", s.message());
  }
}

const std::string& StorageServer::name() const { return impl_->name(); }
uint16_t StorageServer::port() const { return impl_->rpc->port(); }
std::string StorageServer::address() const { return impl_->rpc->address(); }
absl::StatusOr<size_t> StorageServer::ReloadRulesFile() {
  return impl_->runtime->ReloadRulesFile();
}

EmbeddedHost& StorageServer::host() { return impl_->runtime->host(); }
RecordStore& StorageServer::records() { return *impl_->records; }

}  // namespace sroute
