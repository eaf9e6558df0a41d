// SPDX-License-Identifier: Apache-2.0
// ParseTextProto: a protobuf message from text format, with the first
// error as ORIGIN:LINE:COLUMN: MESSAGE (config files, sim scenarios).
//
//   proto::HostConfig config;
//   absl::Status s = ParseTextProto(text, path, &config);
//
// Thread-safe (no state). Header-only: its users link protobuf already.
#ifndef SROUTE_UTIL_TEXT_PROTO_H_
#define SROUTE_UTIL_TEXT_PROTO_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"
#include "util/strings.h"

namespace sroute {

inline absl::Status ParseTextProto(std::string_view text,
                                   std::string_view origin,
                                   google::protobuf::Message* out) {
  class Collector : public google::protobuf::io::ErrorCollector {
   public:
    explicit Collector(std::string_view origin) : origin_(origin) {}
    void AddError(int line, int column, const std::string& message) override {
      if (first_.empty()) {
        first_ = StrCat(origin_, ":", line + 1, ":", column + 1, ": ", message);
      }
    }
    const std::string& first() const { return first_; }

   private:
    std::string origin_;
    std::string first_;
  };
  Collector errors(origin);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(std::string(text), out)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      errors.first().empty()
          ? StrCat(origin, ": not a ", out->GetDescriptor()->name())
          : errors.first());
}

}  // namespace sroute

#endif  // SROUTE_UTIL_TEXT_PROTO_H_
