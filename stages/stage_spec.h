// SPDX-License-Identifier: Apache-2.0
// Stages written on one line, for --stage and sroutectl:
//
//   NAME=KIND[:key=value,...]
//   cacheA=cache:block_size=4K,partition_bytes=64M,policy=s3fifo
//   cacheA=cache:partition=alice/128M,partition=bob/32M
//
// Keys are the names of the fields of the kind's options message
// (proto/config.proto, e.g. CacheOptions); integers take K, M, G and T
// (powers of 1024); a repeated field is given once per value; a field of
// {name, number} messages (CacheOptions.partition) takes NAME/NUMBER, one
// of messages of more scalar fields takes their values in field order,
// V1/V2/... (QosOptions.tenant: alice/lc/2400/100/5000, trailing ones may
// be left out).
#ifndef SROUTE_STAGES_STAGE_SPEC_H_
#define SROUTE_STAGES_STAGE_SPEC_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace sroute {

// Errors name the key and what was expected.
absl::StatusOr<proto::StageConfig> ParseStageSpec(std::string_view spec);

// Sets `options` ("key=value,...", as after KIND:) on `config`, whose kind
// is set: for sroutectl stages set. Repeated {name, number} entries replace
// those of the same name; other repeated fields are replaced whole.
absl::Status ApplyStageOptions(std::string_view options,
                               proto::StageConfig* config);

// The stage's options as "key=value,..." (defaults left out), the inverse
// of ApplyStageOptions, for listings.
std::string FormatStageOptions(const proto::StageConfig& config);

}  // namespace sroute

#endif  // SROUTE_STAGES_STAGE_SPEC_H_
