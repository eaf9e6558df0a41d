// SPDX-License-Identifier: Apache-2.0
#include "hostctl/control_server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "hostctl/control_handler.h"
#include "proto/rpc.pb.h"
#include "rpc/fd_frames.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(StrCat(what, ": ", ErrnoText(errno)));
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        StrCat("bad control socket path '", path, "' (empty or longer than ",
               sizeof(addr.sun_path) - 1, " bytes)"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// True when some process accepts connections on `path`.
bool SomeoneListens(const sockaddr_un& addr) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok =
      connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(
    SSwitch* sw, const std::string& socket_path,
    std::function<void()> on_rules_changed,
    std::function<void(proto::ControlResponse*)> add_stats) {
  auto addr = UnixAddress(socket_path);
  if (!addr.ok()) return addr.status();
  struct stat st {};
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(StrCat(
          "control socket path ", socket_path, " exists and is not a socket"));
    }
    if (SomeoneListens(*addr)) {
      return absl::FailedPreconditionError(StrCat(
          "another process is listening on control socket ", socket_path));
    }
    if (unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
      return Errno(StrCat("cannot remove stale socket ", socket_path));
    }
  }
  // The socket's own directory (/run/sroute) is made if missing, as
  // systemd's RuntimeDirectory= would; nothing further up.
  const size_t slash = socket_path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = socket_path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) == 0) {
      chmod(dir.c_str(), 0755);  // whatever the umask
    } else if (errno != EEXIST) {
      return Errno(StrCat("cannot make the control socket's directory ", dir));
    }
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    absl::Status s = Errno(StrCat("cannot bind control socket ", socket_path));
    close(fd);
    return s;
  }
  if (chmod(socket_path.c_str(), 0600) != 0 || listen(fd, 16) != 0) {
    absl::Status s = Errno(StrCat("control socket ", socket_path));
    close(fd);
    unlink(socket_path.c_str());
    return s;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    absl::Status s = Errno("pipe");
    close(fd);
    unlink(socket_path.c_str());
    return s;
  }
  return std::unique_ptr<ControlServer>(
      new ControlServer(sw, socket_path, fd, pipe_fds[0], pipe_fds[1],
                        std::move(on_rules_changed), std::move(add_stats)));
}

ControlServer::ControlServer(
    SSwitch* sw, std::string path, int listen_fd, int cancel_r, int cancel_w,
    std::function<void()> on_rules_changed,
    std::function<void(proto::ControlResponse*)> add_stats)
    : sw_(sw),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      cancel_r_(cancel_r),
      cancel_w_(cancel_w),
      on_rules_changed_(std::move(on_rules_changed)),
      add_stats_(std::move(add_stats)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

ControlServer::~ControlServer() {
  const char c = 'x';
  while (write(cancel_w_, &c, 1) < 0 && errno == EINTR) {
  }
  shutdown(listen_fd_, SHUT_RDWR);
  accept_thread_.join();
  {
    MutexLock l(&mu_);
    for (Connection& c : conns_) shutdown(c.fd, SHUT_RDWR);
  }
  // No new connections now; join without the lock (a handler may be
  // finishing a request).
  for (Connection& c : conns_) {
    c.thread.join();
    close(c.fd);
  }
  conns_.clear();
  close(listen_fd_);
  close(cancel_r_);
  close(cancel_w_);
  unlink(path_.c_str());
}

void ControlServer::ReapDone() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done.load()) {
      it->thread.join();
      close(it->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void ControlServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {cancel_r_, POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      LogError("control socket ", path_, ": poll: ", ErrnoText(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        LogWarning("control socket ", path_, ": accept: ", ErrnoText(errno));
        poll(nullptr, 0, 100);
        continue;
      }
      return;  // shut down
    }
    MutexLock l(&mu_);
    ReapDone();
    Connection& c = conns_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { Serve(&c); });
  }
}

void ControlServer::Serve(Connection* conn) {
  FdFrameStream stream(conn->fd, kControlFrameLimits);
  while (true) {
    proto::RpcRequest req;
    absl::Status s = stream.Read(&req, absl::InfiniteFuture(), cancel_r_);
    if (!s.ok()) {
      if (!absl::IsOutOfRange(s) && !absl::IsCancelled(s)) {
        LogWarning("control socket ", path_,
                   ": closing a connection: ", s.message());
      }
      break;
    }
    proto::RpcReply reply;
    reply.set_id(req.id());
    if (req.has_control()) {
      *reply.mutable_control() = Handle(req.control());
    } else if (req.has_ping()) {
      // Answered: the host is up.
    } else {
      reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
      reply.set_message(
          "a host's control socket serves control requests and pings only");
    }
    s = stream.Write(reply, absl::Now() + absl::Seconds(10));
    if (!s.ok()) {
      LogWarning("control socket ", path_,
                 ": closing a connection: ", s.message());
      break;
    }
  }
  shutdown(conn->fd, SHUT_RDWR);
  conn->done.store(true);
}

proto::ControlResponse ControlServer::Handle(const proto::ControlRequest& req) {
  bool changed = false;
  proto::ControlResponse resp = HandleControlRequest(
      *sw_, req, add_stats_, &changed, ControlOrigin::kLocal);
  if (changed) {
    LogInfo("rules changed through the control socket ", path_,
            ": now version ", sw_->version());
    if (on_rules_changed_) on_rules_changed_();
  }
  return resp;
}

}  // namespace sroute
