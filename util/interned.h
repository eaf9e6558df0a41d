// SPDX-License-Identifier: Apache-2.0
// InternName: a string kept for the life of the process, the same object
// for equal text, so that a pointer to it can be handed between threads
// with no owner to outlive (an IO saying where it waits, read by a scan of
// the IOs in flight while the IO moves on).
//
// Memory: one copy of each distinct text ever interned. Intern names of
// configuration (endpoints, stages), never per-IO data.
//
// Thread safety: thread-safe; takes a lock: call it when configuration
// changes, not per IO.
#ifndef SROUTE_UTIL_INTERNED_H_
#define SROUTE_UTIL_INTERNED_H_

#include <string>
#include <string_view>

namespace sroute {

const std::string* InternName(std::string_view text);

}  // namespace sroute

#endif  // SROUTE_UTIL_INTERNED_H_
