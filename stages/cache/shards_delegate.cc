// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/shards_delegate.h"

#include <atomic>
#include <charconv>
#include <memory>

#include "stages/cache/shards.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint64_t kMaxBlocksPerIo = 1 << 16;

class Shards : public Delegate {
 public:
  Shards(std::unique_ptr<ShardsSampler> sampler, uint64_t block, bool writes)
      : sampler_(std::move(sampler)), block_(block), writes_(writes) {}

  static absl::StatusOr<std::unique_ptr<Delegate>> Create(
      const DelegateSpec& spec, const Rule&) {
    double rate = 0.01;
    uint64_t block = 4096;
    bool writes = false;
    for (const DelegateArg& a : spec.args) {
      if (a.key == "rate") {
        char* end = nullptr;
        rate = std::strtod(a.value.c_str(), &end);
        if (end == a.value.c_str() || *end != '\0' || !(rate > 0) || rate > 1) {
          return absl::InvalidArgumentError(
              StrCat("rate: a number in (0, 1], not '", a.value, "'"));
        }
      } else if (a.key == "block") {
        auto [p, ec] = std::from_chars(a.value.data(),
                                       a.value.data() + a.value.size(), block);
        if (ec != std::errc() || p != a.value.data() + a.value.size() ||
            block < 512 || block > (1u << 20) || (block & (block - 1)) != 0) {
          return absl::InvalidArgumentError(StrCat(
              "block: a power of two, 512..1048576, not '", a.value, "'"));
        }
      } else if (a.key == "writes") {
        if (a.value != "0" && a.value != "1") {
          return absl::InvalidArgumentError("writes: 0 or 1");
        }
        writes = a.value == "1";
      } else {
        return absl::InvalidArgumentError(
            StrCat("unknown argument '", a.key,
                   "' (takes rate=R, block=BYTES, writes=0|1)"));
      }
    }
    auto sampler = ShardsSampler::Create({.rate = rate});
    if (!sampler.ok()) return sampler.status();
    return std::make_unique<Shards>(*std::move(sampler), block, writes);
  }

  Decision OnRequest(const IoHeader& h, DelegateContext&) override {
    Decision d;
    if (h.length == 0 ||
        !(h.op == Op::kRead || (writes_ && h.op == Op::kWrite))) {
      return d;
    }
    const uint64_t first = h.offset / block_;
    const uint64_t last =
        std::min((h.offset + h.length - 1) / block_, first + kMaxBlocksPerIo);
    const uint64_t n = last - first + 1;
    const uint64_t refs = refs_.fetch_add(n, std::memory_order_relaxed) + n;
    std::string keys;
    for (uint64_t b = first; b <= last; ++b) {
      const uint64_t key = BlockKey(h.file, b);
      if (!sampler_->Sample(key)) continue;
      char hex[17];
      auto [p, ec] = std::to_chars(hex, hex + 16, key, 16);
      (void)ec;
      StrAppend(&keys, keys.empty() ? "" : ",", std::string_view(hex, p - hex));
    }
    if (keys.empty()) return d;
    d.emit = StrCat("shards v=1 rate=", sampler_->rate(), " refs=", refs,
                    " keys=", keys);
    return d;
  }

 private:
  const std::unique_ptr<ShardsSampler> sampler_;
  const uint64_t block_;
  const bool writes_;
  std::atomic<uint64_t> refs_{0};
};

}  // namespace

void RegisterShardsDelegate(DelegateRegistry& registry) {
  (void)registry.Register("shards", &Shards::Create);
}

absl::StatusOr<ShardsSample> ParseShardsSample(std::string_view value) {
  ShardsSample s;
  bool v1 = false;
  for (std::string_view field : StrSplit(value, ' ')) {
    const size_t eq = field.find('=');
    const std::string_view key = field.substr(0, eq);
    const std::string_view val =
        eq == std::string_view::npos ? "" : field.substr(eq + 1);
    if (key == "shards") continue;
    if (key == "v") {
      v1 = val == "1";
    } else if (key == "rate") {
      s.rate = std::strtod(std::string(val).c_str(), nullptr);
    } else if (key == "refs") {
      std::from_chars(val.data(), val.data() + val.size(), s.refs);
    } else if (key == "keys") {
      for (std::string_view k : StrSplit(val, ',')) {
        uint64_t key_value = 0;
        auto [p, ec] =
            std::from_chars(k.data(), k.data() + k.size(), key_value, 16);
        if (ec != std::errc() || p != k.data() + k.size()) {
          return absl::InvalidArgumentError(
              StrCat("bad key '", k, "' in a shards sample"));
        }
        s.keys.push_back(key_value);
      }
    }
  }
  if (!v1 || !(s.rate > 0) || s.keys.empty()) {
    return absl::InvalidArgumentError(
        StrCat("not a shards sample: '", value.substr(0, 80), "'"));
  }
  return s;
}

}  // namespace sroute
