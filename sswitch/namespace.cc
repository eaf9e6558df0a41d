// SPDX-License-Identifier: Apache-2.0
#include "sswitch/namespace.h"

#include <cerrno>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {

std::string JoinChild(std::string_view dir_file, std::string_view name) {
  if (!dir_file.empty() && dir_file.back() == '/')
    return StrCat(dir_file, name);
  return StrCat(dir_file, "/", name);
}

namespace {

struct Listing {
  SSwitch* sw;
  IoHeader dir;
  IoArgs args;
  ListingDone done;
  std::vector<std::string> places;  // [0] is where the directory went
  std::vector<std::vector<DirEntry>> found;
  bool exists_somewhere = false;
  std::unique_ptr<Io> io;  // the readdir in flight
};

void Finish(const std::shared_ptr<Listing>& l) {
  if (!l->exists_somewhere) {
    l->done(ErrnoStatus(ENOENT, StrCat("readdir ", l->dir.file)), {});
    return;
  }
  std::vector<DirEntry> merged;
  const bool filter = l->places.size() > 1;
  absl::flat_hash_set<std::string> seen;
  IoHeader child = l->dir;
  child.op = Op::kLookup;
  for (size_t i = 0; i < l->found.size(); ++i) {
    for (DirEntry& e : l->found[i]) {
      if (filter) {
        child.file = JoinChild(l->dir.file, e.name);
        if (l->sw->RouteOf(child) != JoinChild(l->places[i], e.name)) {
          continue;  // it lives where its route points, not here
        }
      }
      if (seen.insert(e.name).second) merged.push_back(std::move(e));
    }
  }
  l->done(absl::OkStatus(), std::move(merged));
}

void ListPlace(const std::shared_ptr<Listing>& l, size_t i);

// The readdir of place `i` (for i == 0, the directory's own route).
void OnListed(const std::shared_ptr<Listing>& l, size_t i, Io& io) {
  if (io.status.ok()) {
    l->exists_somewhere = true;
  } else if (ErrnoOf(io.status) != ENOENT) {
    l->done(io.status, {});
    return;
  }
  if (i == 0) {
    l->places.push_back(io.target);
    for (std::string& p : l->sw->ChildPlaces(l->dir)) {
      l->places.push_back(std::move(p));
    }
  }
  l->found.push_back(std::move(io.entries));
  if (l->found.size() == l->places.size()) {
    Finish(l);
    return;
  }
  ListPlace(l, i + 1);
}

void ListPlace(const std::shared_ptr<Listing>& l, size_t i) {
  // Replacing the finished Io from inside its completion is allowed.
  auto io = std::make_unique<Io>();
  io->header = l->dir;
  if (i > 0) io->header.file = l->places[i];
  io->args = l->args;
  io->set_completion([l, i](Io& done) { OnListed(l, i, done); });
  Io* raw = io.get();
  l->io = std::move(io);
  l->sw->Route(raw);
}

}  // namespace

void ListDirectory(SSwitch& sw, const IoHeader& dir, const IoArgs& args,
                   ListingDone done) {
  auto l = std::make_shared<Listing>();
  l->sw = &sw;
  l->dir = dir;
  l->dir.op = Op::kReaddir;
  l->args = args;
  l->done = std::move(done);
  ListPlace(l, 0);
}

}  // namespace sroute
