// SPDX-License-Identifier: Apache-2.0
#include "stages/stage_spec.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "stages/stage.h"
#include "util/strings.h"

namespace sroute {
namespace {

namespace pb = google::protobuf;

absl::StatusOr<uint64_t> ParseSize(std::string_view key, std::string_view v) {
  uint64_t n = 0;
  if (!ParseByteSize(v, &n)) {
    return absl::InvalidArgumentError(
        StrCat(key, ": expected a number (with K, M, G or T), not '", v, "'"));
  }
  return n;
}

// The options message of `config`'s kind (created), or null for a kind
// without options.
pb::Message* OptionsOf(proto::StageConfig* config) {
  const pb::FieldDescriptor* f =
      proto::StageConfig::descriptor()->FindFieldByName(config->kind());
  if (f == nullptr || f->containing_oneof() == nullptr) return nullptr;
  return proto::StageConfig::GetReflection()->MutableMessage(config, f);
}

absl::Status SetScalar(pb::Message* m, const pb::FieldDescriptor* f,
                       std::string_view key, std::string_view value) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      rep ? r->AddString(m, f, std::string(value))
          : r->SetString(m, f, std::string(value));
      return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool b;
      if (!absl::SimpleAtob(absl::string_view(value.data(), value.size()),
                            &b)) {
        return absl::InvalidArgumentError(
            StrCat(key, ": expected true or false, not '", value, "'"));
      }
      rep ? r->AddBool(m, f, b) : r->SetBool(m, f, b);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_UINT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      auto n = ParseSize(key, value);
      if (!n.ok()) return n.status();
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT32) {
        if (*n > std::numeric_limits<uint32_t>::max()) {
          return absl::InvalidArgumentError(StrCat(key, ": too large"));
        }
        rep ? r->AddUInt32(m, f, static_cast<uint32_t>(*n))
            : r->SetUInt32(m, f, static_cast<uint32_t>(*n));
      } else {
        rep ? r->AddUInt64(m, f, *n) : r->SetUInt64(m, f, *n);
      }
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      int64_t n;
      if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()),
                            &n)) {
        return absl::InvalidArgumentError(
            StrCat(key, ": expected an integer, not '", value, "'"));
      }
      if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_INT32) {
        rep ? r->AddInt32(m, f, static_cast<int32_t>(n))
            : r->SetInt32(m, f, static_cast<int32_t>(n));
      } else {
        rep ? r->AddInt64(m, f, n) : r->SetInt64(m, f, n);
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          StrCat(key, ": cannot be set on the command line"));
  }
}

// Whether a repeated message's entries can be written on one line: every
// field a scalar (then "V1/V2/...", in field order).
bool PositionalEntries(const pb::Descriptor* d) {
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->is_repeated() ||
        d->field(i)->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      return false;
    }
  }
  return d->field_count() >= 2;
}

// The fields' names as the entry's format: "NAME/NUMBER",
// "name/qos_class/iops/...".
std::string EntryFormat(const pb::Descriptor* d) {
  if (d->field_count() == 2) return "NAME/NUMBER";
  std::string out;
  for (int i = 0; i < d->field_count(); ++i) {
    StrAppend(&out, i == 0 ? "" : "/", d->field(i)->name());
  }
  return out;
}

// An entry of a repeated message from its line: a {name, number} message
// from "NAME/NUMBER" (the name may hold '/'), a message of more scalar
// fields from "V1/V2/..." (the trailing ones may be left out).
absl::Status SetNamed(pb::Message* entry, std::string_view key,
                      std::string_view value) {
  const pb::Descriptor* d = entry->GetDescriptor();
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        StrCat(key, ": expected ", EntryFormat(d), ", not '", value, "'"));
  };
  if (!PositionalEntries(d)) {
    return absl::InvalidArgumentError(
        StrCat(key, ": cannot be given on one line (use a config file)"));
  }
  if (d->field_count() == 2) {
    const size_t slash = value.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return bad();
    if (absl::Status s =
            SetScalar(entry, d->field(0), key, value.substr(0, slash));
        !s.ok()) {
      return s;
    }
    return SetScalar(entry, d->field(1), key, value.substr(slash + 1));
  }
  const std::vector<std::string_view> parts = StrSplit(value, '/');
  if (parts.empty() || parts[0].empty() ||
      parts.size() > static_cast<size_t>(d->field_count())) {
    return bad();
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) continue;  // left at its default
    if (absl::Status s = SetScalar(entry, d->field(i), key, parts[i]);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A scalar field's value as text (entry `index` of a repeated one).
std::string ScalarText(const pb::Message& msg, const pb::FieldDescriptor* fd,
                       int index) {
  const pb::Reflection* rr = msg.GetReflection();
  const bool rep = fd->is_repeated();
  switch (fd->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return rep ? rr->GetRepeatedString(msg, fd, index)
                 : rr->GetString(msg, fd);
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? rr->GetRepeatedBool(msg, fd, index) : rr->GetBool(msg, fd))
                 ? "true"
                 : "false";
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(rep ? rr->GetRepeatedUInt32(msg, fd, index)
                                : rr->GetUInt32(msg, fd));
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(rep ? rr->GetRepeatedUInt64(msg, fd, index)
                                : rr->GetUInt64(msg, fd));
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(rep ? rr->GetRepeatedInt32(msg, fd, index)
                                : rr->GetInt32(msg, fd));
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return std::to_string(rep ? rr->GetRepeatedInt64(msg, fd, index)
                                : rr->GetInt64(msg, fd));
    default:
      return "?";
  }
}

}  // namespace

absl::Status ApplyStageOptions(std::string_view options,
                               proto::StageConfig* config) {
  if (options.empty()) return absl::OkStatus();
  pb::Message* m = OptionsOf(config);
  if (m == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("stage kind '", config->kind(), "' takes no options"));
  }
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::Reflection* r = m->GetReflection();
  // Repeated fields named here start over, but for named entries.
  std::vector<const pb::FieldDescriptor*> cleared;
  for (std::string_view kv : StrSplit(options, ',')) {
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          StrCat("expected key=value, not '", kv, "'"));
    }
    const std::string key(kv.substr(0, eq));
    const std::string_view value = kv.substr(eq + 1);
    const pb::FieldDescriptor* f = d->FindFieldByName(key);
    if (f == nullptr) {
      std::string keys;
      for (int i = 0; i < d->field_count(); ++i) {
        StrAppend(&keys, i == 0 ? "" : ", ", d->field(i)->name());
      }
      return absl::InvalidArgumentError(StrCat("unknown option '", key,
                                               "' for a ", config->kind(),
                                               " stage (options: ", keys, ")"));
    }
    if (f->is_repeated() &&
        f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      // A new entry from the type's prototype (GetRepeatedMessage(0) of
      // an empty field fails a CHECK).
      auto entry =
          std::unique_ptr<pb::Message>(pb::MessageFactory::generated_factory()
                                           ->GetPrototype(f->message_type())
                                           ->New());
      if (absl::Status s = SetNamed(entry.get(), key, value); !s.ok()) {
        return s;
      }
      // Replace the entry of the same first field (its name, or a curve
      // point's target), if any.
      const pb::FieldDescriptor* key_field = f->message_type()->field(0);
      const std::string name = ScalarText(*entry, key_field, 0);
      bool replaced = false;
      for (int i = 0; i < r->FieldSize(*m, f); ++i) {
        pb::Message* old = r->MutableRepeatedMessage(m, f, i);
        if (ScalarText(*old, key_field, 0) == name) {
          old->CopyFrom(*entry);
          replaced = true;
        }
      }
      if (!replaced) r->AddMessage(m, f)->CopyFrom(*entry);
      continue;
    }
    if (f->is_repeated()) {
      if (std::find(cleared.begin(), cleared.end(), f) == cleared.end()) {
        r->ClearField(m, f);
        cleared.push_back(f);
      }
    }
    if (absl::Status s = SetScalar(m, f, key, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::StageConfig> ParseStageSpec(std::string_view spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("expected NAME=KIND[:key=value,...], not '", spec, "'"));
  }
  proto::StageConfig config;
  config.set_name(std::string(spec.substr(0, eq)));
  if (absl::Status s = CheckStageName(config.name()); !s.ok()) return s;
  std::string_view rest = spec.substr(eq + 1);
  const size_t colon = rest.find(':');
  config.set_kind(std::string(rest.substr(0, colon)));
  if (config.kind().empty()) {
    return absl::InvalidArgumentError(
        StrCat("stage ", config.name(), ": no kind after '='"));
  }
  if (colon != std::string_view::npos) {
    if (absl::Status s = ApplyStageOptions(rest.substr(colon + 1), &config);
        !s.ok()) {
      return absl::InvalidArgumentError(
          StrCat("stage ", config.name(), ": ", s.message()));
    }
  }
  return config;
}

std::string FormatStageOptions(const proto::StageConfig& config) {
  const pb::FieldDescriptor* f =
      proto::StageConfig::descriptor()->FindFieldByName(config.kind());
  if (f == nullptr || f->containing_oneof() == nullptr) return "";
  const pb::Reflection* sr = config.GetReflection();
  if (!sr->HasField(config, f)) return "";
  const pb::Message& m = sr->GetMessage(config, f);
  const pb::Reflection* r = m.GetReflection();
  std::vector<const pb::FieldDescriptor*> set;
  r->ListFields(m, &set);
  std::string out;
  for (const pb::FieldDescriptor* fd : set) {
    const int n = fd->is_repeated() ? r->FieldSize(m, fd) : 1;
    for (int i = 0; i < n; ++i) {
      std::string v;
      if (fd->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        const pb::Message& e = r->GetRepeatedMessage(m, fd, i);
        const pb::Descriptor* ed = e.GetDescriptor();
        for (int k = 0; k < ed->field_count(); ++k) {
          StrAppend(&v, k == 0 ? "" : "/", ScalarText(e, ed->field(k), 0));
        }
      } else {
        v = ScalarText(m, fd, i);
      }
      StrAppend(&out, out.empty() ? "" : ",", fd->name(), "=", v);
    }
  }
  return out;
}

}  // namespace sroute
