// SPDX-License-Identifier: Apache-2.0
#include "fuse/inode_table.h"

#include <functional>

#include "absl/container/inlined_vector.h"

namespace sroute {

size_t InodeTable::LinkHash::operator()(
    const std::pair<uint64_t, std::string>& l) const {
  return std::hash<std::string>{}(l.second) * 31 + l.first;
}

InodeTable::InodeTable() {
  Node root;
  root.lookups = 1;  // never forgotten
  nodes_[kRootIno] = std::move(root);
}

bool InodeTable::PathLocked(uint64_t ino, std::string* out) const {
  // Inline: this runs for every request, and most paths are shallow.
  absl::InlinedVector<const std::string*, 16> parts;
  uint64_t cur = ino;
  for (int depth = 0; cur != kRootIno; ++depth) {
    auto it = nodes_.find(cur);
    if (it == nodes_.end() || it->second.links.empty() || depth > 4096) {
      return false;
    }
    parts.push_back(&it->second.links[0].name);
    cur = it->second.links[0].parent;
  }
  out->clear();
  for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
    if (!out->empty()) out->push_back('/');
    out->append(**p);
  }
  return true;
}

std::optional<std::string> InodeTable::Path(uint64_t ino) const {
  MutexLock l(&mu_);
  std::string path;
  if (!PathLocked(ino, &path)) return std::nullopt;
  return path;
}

std::optional<std::string> InodeTable::Path(uint64_t ino,
                                            uint64_t* generation) const {
  MutexLock l(&mu_);
  std::string path;
  if (!PathLocked(ino, &path)) return std::nullopt;
  *generation = generation_.load(std::memory_order_relaxed);
  return path;
}

std::optional<std::string> InodeTable::ChildPath(uint64_t parent,
                                                 std::string_view name) const {
  MutexLock l(&mu_);
  std::string path;
  if (!PathLocked(parent, &path)) return std::nullopt;
  if (!path.empty()) path.push_back('/');
  path.append(name);
  return path;
}

uint64_t InodeTable::Remember(uint64_t parent, std::string_view name, dev_t dev,
                              ino_t file_ino) {
  MutexLock l(&mu_);
  Link link{parent, std::string(name)};
  uint64_t ino;
  auto by_file = by_file_.find({dev, file_ino});
  auto found =
      by_file == by_file_.end() ? nodes_.end() : nodes_.find(by_file->second);
  if (found != nodes_.end() && !found->second.links.empty()) {
    ino = found->first;
  } else {
    // A node left without names is a file removed (or replaced) through
    // the volume, kept until the kernel forgets it, and its home may have
    // given its inode number to this new file already (ext4 does, to a
    // directory removed and made again). The same node would put the new
    // file on the old one's kernel inode if something still holds that
    // (an open descriptor, a release under way): a removed directory's is
    // dead, every lookup and create in it fails with ENOENT. (A file still
    // reached by a name the table never knew gets a second node, as hard
    // links do in libfuse's path-based file systems.)
    ino = next_ino_++;
    Node n;
    n.dev = dev;
    n.file_ino = file_ino;
    nodes_[ino] = std::move(n);
    by_file_[{dev, file_ino}] = ino;  // Forget() keeps this for the new node
  }
  Node& node = nodes_[ino];
  ++node.lookups;
  // The name may have pointed at another node (replaced behind our back).
  auto old = by_link_.find({parent, link.name});
  if (old != by_link_.end() && old->second != ino) {
    DropLinkLocked(parent, link.name);
  }
  bool known = false;
  for (const Link& l2 : node.links) known |= l2 == link;
  if (!known) {
    node.links.push_back(link);
    by_link_[{parent, link.name}] = ino;
    NamesChangedLocked();
  }
  return ino;
}

bool InodeTable::Forget(uint64_t ino, uint64_t count) {
  if (ino == kRootIno) return false;
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return true;
  Node& n = it->second;
  n.lookups = count >= n.lookups ? 0 : n.lookups - count;
  if (n.lookups > 0 || n.open > 0) return false;
  for (const Link& link : n.links) by_link_.erase({link.parent, link.name});
  auto f = by_file_.find({n.dev, n.file_ino});
  if (f != by_file_.end() && f->second == ino) by_file_.erase(f);
  hidden_nodes_.erase(ino);
  nodes_.erase(it);
  NamesChangedLocked();
  return true;
}

void InodeTable::DropLinkLocked(uint64_t parent, std::string_view name) {
  auto it = by_link_.find({parent, std::string(name)});
  if (it == by_link_.end()) return;
  auto node = nodes_.find(it->second);
  by_link_.erase(it);
  NamesChangedLocked();
  if (node == nodes_.end()) return;
  auto& links = node->second.links;
  for (size_t i = 0; i < links.size(); ++i) {
    if (links[i].parent == parent && links[i].name == name) {
      links.erase(links.begin() + i);
      break;
    }
  }
}

void InodeTable::Unlinked(uint64_t parent, std::string_view name) {
  MutexLock l(&mu_);
  DropLinkLocked(parent, name);
}

void InodeTable::Renamed(uint64_t parent, std::string_view name,
                         uint64_t new_parent, std::string_view new_name) {
  MutexLock l(&mu_);
  DropLinkLocked(new_parent, new_name);  // a replaced target loses its name
  auto it = by_link_.find({parent, std::string(name)});
  if (it == by_link_.end()) return;
  NamesChangedLocked();
  const uint64_t ino = it->second;
  by_link_.erase(it);
  for (Link& link : nodes_[ino].links) {
    if (link.parent == parent && link.name == name) {
      link = Link{new_parent, std::string(new_name)};
    }
  }
  by_link_[{new_parent, std::string(new_name)}] = ino;
}

void InodeTable::Exchanged(uint64_t parent, std::string_view name,
                           uint64_t new_parent, std::string_view new_name) {
  MutexLock l(&mu_);
  auto a = by_link_.find({parent, std::string(name)});
  auto b = by_link_.find({new_parent, std::string(new_name)});
  const std::optional<uint64_t> ia =
      a == by_link_.end() ? std::nullopt : std::optional<uint64_t>(a->second);
  const std::optional<uint64_t> ib =
      b == by_link_.end() ? std::nullopt : std::optional<uint64_t>(b->second);
  auto relink = [&](std::optional<uint64_t> ino, const Link& from,
                    const Link& to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ino) return;
    for (Link& link : nodes_[*ino].links) {
      if (link == from) link = to;
    }
    by_link_[{to.parent, to.name}] = *ino;
  };
  by_link_.erase({parent, std::string(name)});
  by_link_.erase({new_parent, std::string(new_name)});
  NamesChangedLocked();
  const Link la{parent, std::string(name)},
      lb{new_parent, std::string(new_name)};
  relink(ia, la, lb);
  relink(ib, lb, la);
}

std::optional<uint64_t> InodeTable::Find(uint64_t parent,
                                         std::string_view name) const {
  MutexLock l(&mu_);
  auto it = by_link_.find({parent, std::string(name)});
  if (it == by_link_.end()) return std::nullopt;
  return it->second;
}

void InodeTable::Opened(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) ++it->second.open;
}

std::optional<std::string> InodeTable::Released(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return std::nullopt;
  Node& n = it->second;
  if (n.open > 0) --n.open;
  if (n.open > 0) return std::nullopt;
  std::optional<std::string> hidden;
  if (n.hidden && !n.links.empty()) {
    std::string path;
    hidden = PathLocked(ino, &path) ? std::move(path) : n.links[0].name;
    RemovingLocked(*hidden);
    by_link_.erase({n.links[0].parent, n.links[0].name});
    n.links.erase(n.links.begin());
    n.hidden = false;
    hidden_nodes_.erase(ino);
    NamesChangedLocked();
  }
  if (n.lookups == 0) {  // the kernel forgot it while it was open
    for (const Link& link : n.links) by_link_.erase({link.parent, link.name});
    auto f = by_file_.find({n.dev, n.file_ino});
    if (f != by_file_.end() && f->second == ino) by_file_.erase(f);
    hidden_nodes_.erase(ino);
    nodes_.erase(it);
    NamesChangedLocked();
  }
  return hidden;
}

int InodeTable::open_count(uint64_t ino) const {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? 0 : it->second.open;
}

std::optional<std::string> InodeTable::Hide(uint64_t ino, uint64_t parent,
                                            std::string_view name,
                                            uint64_t hidden_parent,
                                            std::string hidden_name) {
  MutexLock l(&mu_);
  DropLinkLocked(parent, name);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || it->second.open == 0) {
    // Closed (or forgotten) meanwhile: nothing will release the name.
    std::string path;
    if (!PathLocked(hidden_parent, &path)) path.clear();
    NamesChangedLocked();
    std::string gone = path.empty() ? hidden_name : path + "/" + hidden_name;
    RemovingLocked(gone);
    return gone;
  }
  it->second.links.insert(it->second.links.begin(),
                          Link{hidden_parent, hidden_name});
  it->second.hidden = true;
  hidden_nodes_.insert(ino);
  NamesChangedLocked();
  by_link_[{hidden_parent, std::move(hidden_name)}] = ino;
  return std::nullopt;
}

std::vector<std::pair<uint64_t, std::string>> InodeTable::HiddenIn(
    uint64_t dir) const {
  MutexLock l(&mu_);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (uint64_t ino : hidden_nodes_) {  // few: not every node (an rmdir's)
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) continue;
    const Node& n = it->second;
    if (!n.links.empty() && n.links[0].parent == dir) {
      out.emplace_back(ino, n.links[0].name);
    }
  }
  return out;
}

bool InodeTable::MovedHidden(uint64_t ino, uint64_t from, uint64_t to,
                             const std::string& name,
                             const std::string& to_path) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end() && it->second.hidden &&
      it->second.links[0] == Link{from, name}) {
    by_link_.erase({from, name});
    it->second.links[0].parent = to;
    by_link_[{to, name}] = ino;
    NamesChangedLocked();
    return true;
  }
  RemovingLocked(to_path);
  return false;
}

namespace {
std::string FolderOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}
}  // namespace

void InodeTable::RemovingLocked(const std::string& path) {
  ++removing_[FolderOf(path)];
}

std::vector<absl::AnyInvocable<void() &&>> InodeTable::HiddenNameRemoved(
    const std::string& path) {
  MutexLock l(&mu_);
  const std::string folder = FolderOf(path);
  auto it = removing_.find(folder);
  if (it == removing_.end() || --it->second > 0) return {};
  removing_.erase(it);
  auto waiting = after_removals_.extract(folder);
  if (waiting.empty()) return {};
  return std::move(waiting.mapped());
}

void InodeTable::AfterHiddenRemovals(const std::string& dir_path,
                                     absl::AnyInvocable<void() &&> then) {
  {
    MutexLock l(&mu_);
    if (removing_.contains(dir_path)) {
      after_removals_[dir_path].push_back(std::move(then));
      return;
    }
  }
  std::move(then)();
}

bool InodeTable::hidden(uint64_t ino) const {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  return it != nodes_.end() && it->second.hidden;
}

void InodeTable::SetTagged(uint64_t ino, TaggedUntil Node::*fact, uint64_t tag,
                           uint64_t until_ns) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) it->second.*fact = TaggedUntil{tag, until_ns};
}

bool InodeTable::Tagged(uint64_t ino, TaggedUntil Node::*fact, uint64_t tag,
                        uint64_t now_ns) const {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  return it != nodes_.end() && (it->second.*fact).Holds(tag, now_ns);
}

void InodeTable::SetNoCapability(uint64_t ino, uint64_t tag,
                                 uint64_t until_ns) {
  SetTagged(ino, &Node::no_capability, tag, until_ns);
}

bool InodeTable::NoCapability(uint64_t ino, uint64_t tag,
                              uint64_t now_ns) const {
  return Tagged(ino, &Node::no_capability, tag, now_ns);
}

void InodeTable::SetWithoutSetid(uint64_t ino, uint64_t tag,
                                 uint64_t until_ns) {
  SetTagged(ino, &Node::without_setid, tag, until_ns);
}

bool InodeTable::WithoutSetid(uint64_t ino, uint64_t tag,
                              uint64_t now_ns) const {
  return Tagged(ino, &Node::without_setid, tag, now_ns);
}

size_t InodeTable::size() const {
  MutexLock l(&mu_);
  return nodes_.size();
}

std::vector<uint64_t> InodeTable::Inodes() const {
  MutexLock l(&mu_);
  std::vector<uint64_t> out;
  out.reserve(nodes_.size());
  for (const auto& [ino, node] : nodes_) out.push_back(ino);
  return out;
}

}  // namespace sroute
