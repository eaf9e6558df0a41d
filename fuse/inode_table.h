// SPDX-License-Identifier: Apache-2.0
// InodeTable: the FUSE inode numbers of a volume and the names they stand
// for. A node is one file (keyed by the identity its home reported: st_dev
// and st_ino), known under one or more (parent, name) links, and counted by
// the kernel's lookups. Nodes hold no file descriptors, so the table scales
// past the open-files limit; a node goes away when the kernel forgets it.
//
// Thread safety: thread-safe (one mutex; no IO happens under it).
#ifndef SROUTE_FUSE_INODE_TABLE_H_
#define SROUTE_FUSE_INODE_TABLE_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "util/mutex.h"

namespace sroute {

class InodeTable {
 public:
  static constexpr uint64_t kRootIno = 1;  // FUSE_ROOT_ID; its path is ""

  InodeTable();

  // The path of `ino` relative to the volume root ("" for the root), through
  // its first link. nullopt for an unknown inode.
  std::optional<std::string> Path(uint64_t ino) const;
  // The same, and the generation() it is valid for.
  std::optional<std::string> Path(uint64_t ino, uint64_t* generation) const;
  // Changes whenever a name of any node may have changed (links added,
  // dropped, renamed, hidden; nodes forgotten): a path computed at
  // generation G is still the path while generation() == G. Lets open files
  // keep their names without taking the table's lock on every IO.
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  // Path(parent) + "/" + name.
  std::optional<std::string> ChildPath(uint64_t parent,
                                       std::string_view name) const;

  // Records a successful lookup (or create) of `name` in `parent` that found
  // the file identified by (dev, file_ino): the node gains one kernel
  // reference and the link. Returns the node's inode number. A node left
  // with no name is not found again: its inode number may be a new file's.
  uint64_t Remember(uint64_t parent, std::string_view name, dev_t dev,
                    ino_t file_ino);
  // The kernel dropped `count` references. Returns true if the node is gone.
  bool Forget(uint64_t ino, uint64_t count);
  // A node stays while it has lookups or open handles.

  // Namespace changes the volume performed.
  void Unlinked(uint64_t parent, std::string_view name);
  void Renamed(uint64_t parent, std::string_view name, uint64_t new_parent,
               std::string_view new_name);
  // RENAME_EXCHANGE.
  void Exchanged(uint64_t parent, std::string_view name, uint64_t new_parent,
                 std::string_view new_name);

  // The node a (parent, name) link names, if the kernel knows it.
  std::optional<uint64_t> Find(uint64_t parent, std::string_view name) const;

  // Open file handles: an unlinked file that is still open keeps its data
  // under a hidden name until the last handle goes.
  void Opened(uint64_t ino);
  // Returns the hidden path to remove when this was the last handle of a
  // hidden node. Every path returned here, by Hide() or counted by
  // MovedHidden() is a removal in flight until HiddenNameRemoved(path).
  std::optional<std::string> Released(uint64_t ino);
  int open_count(uint64_t ino) const;
  // Replaces the link (parent, name) of `ino` with (hidden_parent,
  // hidden_name): the reserved folder's (kRootIno, ".sroute/unlinked/N"),
  // or a hidden name in the same folder; getattr then reports one link
  // less, and Released() returns the hidden link's whole path. If the last
  // handle closed while the hidden name was being made, returns that path
  // at once: the caller removes it (no Released() is left to come).
  std::optional<std::string> Hide(uint64_t ino, uint64_t parent,
                                  std::string_view name, uint64_t hidden_parent,
                                  std::string hidden_name);
  bool hidden(uint64_t ino) const;
  // The hidden links in folder `dir` (files unlinked there while open), by
  // node and name.
  std::vector<std::pair<uint64_t, std::string>> HiddenIn(uint64_t dir) const;
  // After the rename that moved the hidden link (from, name) of `ino` to
  // (to, name): records it and returns true. False if the last handle
  // closed meanwhile (its release removed the old name, gone by then): the
  // caller removes the new one.
  // `to_path` is the new name's whole path.
  bool MovedHidden(uint64_t ino, uint64_t from, uint64_t to,
                   const std::string& name, const std::string& to_path);
  // A hidden name being removed (above) is gone; returns what waited for
  // the last removal in its folder: the caller runs it.
  std::vector<absl::AnyInvocable<void() &&>> HiddenNameRemoved(
      const std::string& path);
  // Runs `then` once no hidden name in the folder `dir_path` is being
  // removed (at once if none is): until then the folder is not empty on
  // its endpoint, though it is to the kernel. Runs it on the thread that
  // finished the last removal, outside the table's lock.
  void AfterHiddenRemovals(const std::string& dir_path,
                           absl::AnyInvocable<void() &&> then);

  // Files known to have no security.capability xattr, which the kernel asks
  // for before every write through its page cache: answered here, without
  // a trip to the endpoint, while the caller's generation of xattr changes
  // is still `tag` and CLOCK_MONOTONIC is before `until_ns`.
  void SetNoCapability(uint64_t ino, uint64_t tag, uint64_t until_ns);
  bool NoCapability(uint64_t ino, uint64_t tag, uint64_t now_ns) const;
  // Files known to have no set-ID bits and no capabilities (their clearing
  // before a write found nothing left, fuse/kill_setid.h), while the
  // volume's setid generation is `tag` and CLOCK_MONOTONIC is before
  // `until_ns`: the next open of the file starts knowing it, as a local
  // file system's S_NOSEC inode.
  void SetWithoutSetid(uint64_t ino, uint64_t tag, uint64_t until_ns);
  bool WithoutSetid(uint64_t ino, uint64_t tag, uint64_t now_ns) const;

  size_t size() const;
  // Every inode number the kernel knows now (the root included).
  std::vector<uint64_t> Inodes() const;

 private:
  struct Link {
    uint64_t parent;
    std::string name;
    bool operator==(const Link&) const = default;
  };
  // A fact about a file that holds while a generation is `tag` and
  // CLOCK_MONOTONIC is before `until_ns`.
  struct TaggedUntil {
    uint64_t tag = 0;
    uint64_t until_ns = 0;
    bool Holds(uint64_t t, uint64_t now_ns) const {
      return tag == t && now_ns < until_ns;
    }
  };
  struct Node {
    uint64_t lookups = 0;
    dev_t dev = 0;
    ino_t file_ino = 0;
    std::vector<Link> links;    // links[0] names the node
    int open = 0;               // open file handles
    bool hidden = false;        // unlinked while open: links[0] is hidden
    TaggedUntil no_capability;  // see SetNoCapability
    TaggedUntil without_setid;  // see SetWithoutSetid
  };
  void SetTagged(uint64_t ino, TaggedUntil Node::*fact, uint64_t tag,
                 uint64_t until_ns);
  bool Tagged(uint64_t ino, TaggedUntil Node::*fact, uint64_t tag,
              uint64_t now_ns) const;
  struct LinkHash {
    size_t operator()(const std::pair<uint64_t, std::string>& l) const;
  };

  bool PathLocked(uint64_t ino, std::string* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLinkLocked(uint64_t parent, std::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemovingLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NamesChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    generation_.fetch_add(1, std::memory_order_release);
  }

  // Guards the nodes and their indexes (below). A leaf: no syscall and no
  // FUSE reply runs under it.
  mutable Mutex mu_;
  // Written under mu_, read without it. Starts at 1: 0 is never valid.
  std::atomic<uint64_t> generation_{1};
  uint64_t next_ino_ ABSL_GUARDED_BY(mu_) = kRootIno + 1;
  absl::flat_hash_map<uint64_t, Node> nodes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<dev_t, ino_t>, uint64_t> by_file_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<uint64_t, std::string>, uint64_t, LinkHash>
      by_link_ ABSL_GUARDED_BY(mu_);
  // The nodes with `hidden` set.
  absl::flat_hash_set<uint64_t> hidden_nodes_ ABSL_GUARDED_BY(mu_);
  // Hidden names being removed, by folder path, and what waits for them.
  absl::flat_hash_map<std::string, int> removing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::vector<absl::AnyInvocable<void() &&>>>
      after_removals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_FUSE_INODE_TABLE_H_
