// SPDX-License-Identifier: Apache-2.0
#include "rpc/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

std::string Hmac(std::string_view secret, std::string_view label,
                 std::string_view a, std::string_view b) {
  std::string msg;
  msg.reserve(label.size() + a.size() + b.size() + 2);
  // Lengths are fixed (nonces) or constant (labels), so plain concatenation
  // with separators is unambiguous.
  StrAppend(&msg, label, '\0', a, '\0', b);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
           &len) == nullptr) {
    // Only on allocation failure inside OpenSSL: no proof can be made, and
    // an empty one never matches.
    return std::string();
  }
  return std::string(reinterpret_cast<char*>(out), len);
}

}  // namespace

absl::StatusOr<std::string> LoadSecretFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return ErrnoStatus(errno, StrCat("secret file ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        StrCat("secret file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        StrCat("secret file ", path, " may be read by other users (mode 0",
               (st.st_mode >> 6) & 7, (st.st_mode >> 3) & 7, st.st_mode & 7,
               "); make it private: chmod 600 ", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        StrCat("secret file ", path, " holds ", secret.size(),
               " bytes; a cluster secret needs at least ", kMinSecretBytes,
               " (e.g. head -c 32 /dev/urandom | base64 > ", path, ")"));
  }
  return secret;
}

std::string NewNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()),
                 static_cast<int>(nonce.size())) != 1) {
    // Without randomness a handshake could be replayed: refuse to go on.
    std::abort();
  }
  return nonce;
}

std::string ClientProof(std::string_view secret, std::string_view client_nonce,
                        std::string_view server_nonce) {
  return Hmac(secret, "sroute-rpc-v1 client", client_nonce, server_nonce);
}

std::string ServerProof(std::string_view secret, std::string_view client_nonce,
                        std::string_view server_nonce) {
  return Hmac(secret, "sroute-rpc-v1 server", client_nonce, server_nonce);
}

bool ProofMatches(std::string_view expected, std::string_view got) {
  return !expected.empty() && expected.size() == got.size() &&
         CRYPTO_memcmp(expected.data(), got.data(), got.size()) == 0;
}

}  // namespace sroute
