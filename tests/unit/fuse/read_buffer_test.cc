// SPDX-License-Identifier: Apache-2.0
// ReadBuffer: page-aligned read destinations reused per thread, in size
// classes up to the kernel's largest read (1 MiB).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "fuse/request.h"
#include "gtest/gtest.h"

namespace sroute::fuse_internal {
namespace {

bool PageAligned(const char* p) {
  return reinterpret_cast<uintptr_t>(p) % 4096 == 0;
}

// Allocates a buffer of `size` bytes, writes it end to end and frees it.
void UseOnce(size_t size) {
  ReadBuffer buffer;
  buffer.Allocate(size);
  EXPECT_TRUE(PageAligned(buffer.get()));
  std::memset(buffer.get(), 0x5a, size);
}

// Page faults this thread took while running `f`: a buffer that went back
// to the kernel faults its pages in again when next written.
template <typename F>
long FaultsDuring(F f) {
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  f();
  getrusage(RUSAGE_THREAD, &after);
  return (after.ru_minflt - before.ru_minflt) +
         (after.ru_majflt - before.ru_majflt);
}

// A sanitizer's own bookkeeping faults a page now and then (TSan: one in
// eight reuses of a 128 KiB buffer); a buffer that went back to the kernel
// faults all of its pages on every reuse.
constexpr long kStrayFaults = 4;

TEST(ReadBufferTest, EverySizeUpToOneMebibyteIsReusedWithoutFaults) {
  // 256 KiB is the readahead of a reader that said it reads sequentially:
  // such a buffer used to go back to the kernel after each read and fault
  // in 64 fresh pages for the next.
  for (size_t size : {size_t{1}, size_t{4096}, size_t{5000}, size_t{128} << 10,
                      size_t{256} << 10, size_t{1} << 20}) {
    SCOPED_TRACE(size);
    UseOnce(size);
    EXPECT_LE(FaultsDuring([&] {
                for (int i = 0; i < 8; ++i) UseOnce(size);
              }),
              kStrayFaults);
  }
}

TEST(ReadBufferTest, ABufferServesAnySizeOfItsClass) {
  // The kept buffer comes back as it was left; one given back to malloc
  // would be unmapped or carry malloc's bookkeeping in its first bytes.
  const size_t class_size = 512 << 10;
  const char* kept = nullptr;
  {
    ReadBuffer buffer;
    buffer.Allocate(class_size);
    std::memset(buffer.get(), 0x5a, class_size);
    kept = buffer.get();
  }
  for (size_t size : {size_t{300} << 10, size_t{257} << 10}) {
    SCOPED_TRACE(size);
    ReadBuffer buffer;
    buffer.Allocate(size);
    ASSERT_EQ(buffer.get(), kept);
    EXPECT_EQ(std::count(buffer.get(), buffer.get() + class_size, 0x5a),
              static_cast<long>(class_size));
  }
}

TEST(ReadBufferTest, LargerReadsAreServed) {
  ReadBuffer buffer;
  buffer.Allocate(size_t{3} << 20);
  EXPECT_TRUE(PageAligned(buffer.get()));
  std::memset(buffer.get(), 1, size_t{3} << 20);
}

}  // namespace
}  // namespace sroute::fuse_internal
