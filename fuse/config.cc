#include "fuse/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "util/strings.h"

namespace sroute {
namespace {

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(std::string path) : path_(std::move(path)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = StrCat(path_, ":", line + 1, ":", column + 1, ": ", message);
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string path_;
  std::string first_;
};

}  // namespace

absl::StatusOr<proto::VolumeConfig> LoadVolumeConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read config file ", path));
  std::stringstream text;
  text << in.rdbuf();
  proto::VolumeConfig config;
  Collector errors(path);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text.str(), &config)) {
    return absl::InvalidArgumentError(errors.first().empty()
                                          ? StrCat(path, ": not a VolumeConfig")
                                          : errors.first());
  }
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(path, ": ", why));
  };
  if (config.version() > 1) {
    return bad(StrCat("version ", config.version(),
                      " is newer than this sroute-fuse understands (1)"));
  }
  if (!config.kernel_cache().empty() && config.kernel_cache() != "off" &&
      config.kernel_cache() != "auto") {
    return bad(StrCat("kernel_cache must be \"off\" or \"auto\", not \"",
                      config.kernel_cache(), "\""));
  }
  for (const auto& e : config.endpoint()) {
    if (e.name().empty() || (e.dir().empty() && e.server().empty())) {
      return bad("every endpoint needs a name and a dir or a server");
    }
  }
  for (const auto& t : config.tenant()) {
    if (t.name().empty() ||
        t.who_case() == proto::VolumeConfig::Tenant::WHO_NOT_SET) {
      return bad("every tenant needs a name and a uid, gid or cgroup");
    }
  }
  if (!config.secret_file().empty() &&
      std::filesystem::path(config.secret_file()).is_relative()) {
    config.set_secret_file(
        (std::filesystem::path(path).parent_path() / config.secret_file())
            .string());
  }
  if (!config.rules_file().empty() &&
      std::filesystem::path(config.rules_file()).is_relative()) {
    config.set_rules_file(
        (std::filesystem::path(path).parent_path() / config.rules_file())
            .string());
  }
  return config;
}

}  // namespace sroute
