// SPDX-License-Identifier: Apache-2.0
// Namespace questions every front end asks the same way (docs/design.md §3): a
// name exists exactly where its rules route it, so a directory's listing is
// its own route's listing merged with every place the rules may send its
// children, each name kept only where its own route points.
#ifndef SROUTE_SSWITCH_NAMESPACE_H_
#define SROUTE_SSWITCH_NAMESPACE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "sswitch/io.h"
#include "sswitch/sswitch.h"

namespace sroute {

// "//HOST/DIR" + NAME -> "//HOST/DIR/NAME" (and "//HOST/" + NAME ->
// "//HOST/NAME").
std::string JoinChild(std::string_view dir_file, std::string_view name);

using ListingDone = absl::AnyInvocable<void(absl::Status status,
                                            std::vector<DirEntry> entries)>;

// Lists directory `dir` (a readdir header; args carry the caller's
// credentials) through `sw`: the directory's own route, then each of
// sw.ChildPlaces(dir); a place that does not exist holds no names. Names
// appear once, in the order found ("." and ".." are not added). `done` runs
// once, possibly on another thread. ENOENT only when the directory exists
// nowhere.
void ListDirectory(SSwitch& sw, const IoHeader& dir, const IoArgs& args,
                   ListingDone done);

}  // namespace sroute

#endif  // SROUTE_SSWITCH_NAMESPACE_H_
