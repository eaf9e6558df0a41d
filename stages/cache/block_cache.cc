// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/block_cache.h"

#include <cstring>
#include <new>

#include "absl/hash/hash.h"

namespace sroute {

void Partition::List::PushHead(Block* b) {
  b->prev = nullptr;
  b->next = head;
  if (head != nullptr) head->prev = b;
  head = b;
  if (tail == nullptr) tail = b;
  ++size;
}

void Partition::List::Remove(Block* b) {
  if (b->prev != nullptr) b->prev->next = b->next;
  if (b->next != nullptr) b->next->prev = b->prev;
  if (head == b) head = b->next;
  if (tail == b) tail = b->prev;
  b->prev = b->next = nullptr;
  --size;
}

size_t Partition::Hash::operator()(const Key& k) const {
  return absl::HashOf(k.file, k.index);
}

Partition::Partition(Policy policy, uint64_t capacity_blocks, size_t block_size,
                     Admission admission)
    : policy_(policy), capacity_(capacity_blocks), block_size_(block_size) {
  if (admission == Admission::kFrequency && policy == Policy::kS3Fifo) {
    sketch_ = std::make_unique<FrequencySketch>(capacity_blocks);
  }
}

Partition::~Partition() {
  for (Block* b : index_) Free(b);
}

Block* Partition::Find(uint32_t file, uint64_t index) const {
  auto it = index_.find(Key{file, index});
  return it == index_.end() ? nullptr : *it;
}

Block* Partition::Lookup(uint32_t file, uint64_t index) {
  Block* b = Find(file, index);
  if (b == nullptr) return nullptr;
  if (policy_ == Policy::kLru) {
    main_.Remove(b);
    main_.PushHead(b);
  } else if (b->freq < 3) {
    ++b->freq;
  }
  if (sketch_ != nullptr) sketch_->Increment(GhostKey(file, index));
  return b;
}

size_t Partition::SmallTarget() const {
  // With frequency admission the small queue is W-TinyLFU's window (1 %):
  // the sketch, not the queue's length, tells a hot block from a passing
  // one.
  const uint64_t share = sketch_ != nullptr ? capacity_ / 100 : capacity_ / 10;
  return share > 0 ? share : 1;
}

Block* Partition::Insert(uint32_t file, uint64_t index) {
  if (capacity_ == 0) return nullptr;
  while (index_.size() >= capacity_) {
    if (!EvictOne()) return nullptr;
  }
  void* mem = ::operator new(sizeof(Block) + block_size_);
  Block* b = new (mem) Block();
  std::memset(b->data(), 0, block_size_);
  b->file = file;
  b->index = index;
  index_.insert(b);
  if (policy_ == Policy::kLru) {
    main_.PushHead(b);
    return b;
  }
  const uint64_t key = GhostKey(file, index);
  if (sketch_ != nullptr) sketch_->Increment(key);
  // A key seen lately (in the ghost queue) goes straight to main. With
  // frequency admission every block enters by the small queue (the
  // sketch remembers what the ghost queue would).
  auto g = sketch_ != nullptr ? ghost_.end() : ghost_.find(key);
  if (g != ghost_.end()) {
    ghost_.erase(g);
    b->in_main = 1;
    main_.PushHead(b);
  } else {
    small_.PushHead(b);
  }
  return b;
}

void Partition::Erase(Block* b) {
  (b->in_main || policy_ == Policy::kLru ? main_ : small_).Remove(b);
  index_.erase(b);
  Free(b);
}

void Partition::Free(Block* b) {
  b->~Block();
  ::operator delete(b);
}

void Partition::Drop(Block* b) {
  if (on_evict_) on_evict_(b);
  ++evictions_;
  index_.erase(b);
  Free(b);
}

void Partition::SetCapacity(uint64_t capacity_blocks) {
  if (sketch_ != nullptr) sketch_->Resize(capacity_blocks);
  capacity_ = capacity_blocks;
  while (index_.size() > capacity_) {
    if (!EvictOne()) break;
  }
}

void Partition::ForEach(const std::function<void(Block*)>& fn) const {
  for (Block* b : index_) fn(b);
}

bool Partition::EvictOne() {
  if (index_.empty()) return false;
  if (policy_ == Policy::kLru) {
    // Oldest first, passing over blocks that cannot go (dirty, flushing).
    for (Block* b = main_.tail; b != nullptr; b = b->prev) {
      if (b->dirty || b->flushing) continue;
      main_.Remove(b);
      Drop(b);
      return true;
    }
    return false;
  }
  if (sketch_ != nullptr) return EvictAdmitting();
  if (small_.size >= SmallTarget()) return EvictSmall();
  return EvictMain();
}

bool Partition::EvictAdmitting() {
  // W-TinyLFU's choice with S3-FIFO's queues: the small queue's oldest
  // block and the block main would let go next; the one asked for less
  // often leaves.
  while (small_.tail != nullptr &&
         (small_.size >= SmallTarget() || main_.tail == nullptr)) {
    Block* candidate = small_.tail;
    small_.Remove(candidate);
    if (candidate->dirty || candidate->flushing ||
        main_.size + SmallTarget() < capacity_) {
      candidate->freq = 0;
      candidate->in_main = 1;
      main_.PushHead(candidate);
      continue;  // room in main (or it cannot go): look again
    }
    Block* victim = MainVictim();
    if (victim != nullptr &&
        sketch_->Estimate(GhostKey(candidate->file, candidate->index)) >
            sketch_->Estimate(GhostKey(victim->file, victim->index))) {
      main_.Remove(victim);
      Drop(victim);
      candidate->freq = 0;
      candidate->in_main = 1;
      main_.PushHead(candidate);
      return true;
    }
    Drop(candidate);
    return true;
  }
  return EvictMain();
}

Block* Partition::MainVictim() {
  // As EvictMain walks, without dropping: a block read since its last pass
  // loses a count and goes round again; pinned ones are passed over.
  size_t pinned = 0;
  while (main_.tail != nullptr && pinned <= main_.size) {
    Block* b = main_.tail;
    if (b->dirty || b->flushing) {
      ++pinned;
      main_.Remove(b);
      main_.PushHead(b);
      continue;
    }
    if (b->freq >= 1) {
      --b->freq;
      main_.Remove(b);
      main_.PushHead(b);
      continue;
    }
    return b;
  }
  return nullptr;
}

bool Partition::EvictSmall() {
  // Bounded: a block that cannot go moves to main, so each is seen once.
  while (small_.tail != nullptr) {
    Block* b = small_.tail;
    small_.Remove(b);
    if (b->freq >= 1 || b->dirty || b->flushing) {
      b->freq = 0;
      b->in_main = 1;
      main_.PushHead(b);
      continue;
    }
    AddGhost(GhostKey(b->file, b->index));
    Drop(b);
    return true;
  }
  return EvictMain();
}

bool Partition::EvictMain() {
  // Each pass lowers a counter or passes a pinned block; a full round of
  // pinned blocks means nothing can go.
  size_t pinned = 0;
  while (main_.tail != nullptr && pinned <= main_.size) {
    Block* b = main_.tail;
    main_.Remove(b);
    if (b->dirty || b->flushing) {
      ++pinned;
      main_.PushHead(b);
      continue;
    }
    if (b->freq >= 1) {
      --b->freq;
      main_.PushHead(b);
      continue;
    }
    Drop(b);
    return true;
  }
  return false;
}

void Partition::AddGhost(uint64_t key) {
  const uint64_t seq = ++ghost_seq_;
  ghost_[key] = seq;
  ghost_queue_.emplace_back(key, seq);
  // As many ghost keys as the partition has blocks, the oldest going
  // first.
  auto live = [this](const std::pair<uint64_t, uint64_t>& e) {
    auto it = ghost_.find(e.first);
    return it != ghost_.end() && it->second == e.second;
  };
  while (ghost_.size() > capacity_) {
    if (live(ghost_queue_.front())) ghost_.erase(ghost_queue_.front().first);
    ghost_queue_.pop_front();
  }
  // Entries of keys that left the ghost early (read again) are skipped;
  // compacted when they pile up.
  while (!ghost_queue_.empty() && !live(ghost_queue_.front())) {
    ghost_queue_.pop_front();
  }
  if (ghost_queue_.size() > 2 * ghost_.size() + 16) {
    std::deque<std::pair<uint64_t, uint64_t>> kept;
    for (const auto& e : ghost_queue_) {
      if (live(e)) kept.push_back(e);
    }
    ghost_queue_.swap(kept);
  }
}

}  // namespace sroute
