// SPDX-License-Identifier: Apache-2.0
// The cluster secret and the mutual-authentication handshake of sroute's
// RPC (proto/rpc.proto). Every host is given the same secret file; a
// connection is served only after both ends proved they know it:
//
//   client -> server  Hello{version, client_nonce, name, role}
//   server -> client  Hello{version, server_nonce, name, role}
//   client -> server  Auth{ClientProof(secret, client_nonce, server_nonce)}
//   server -> client  Auth{ServerProof(secret, client_nonce, server_nonce)}
//
// A proof is HMAC-SHA256 keyed with the secret over a label and both nonces:
// fresh nonces on each side make a proof useless on any other connection,
// and distinct labels keep one side's proof from passing as the other's.
#ifndef SROUTE_RPC_HANDSHAKE_H_
#define SROUTE_RPC_HANDSHAKE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sroute {

inline constexpr uint32_t kRpcProtocolVersion = 1;
inline constexpr size_t kNonceBytes = 32;
// Secrets shorter than this are refused: they could be guessed.
inline constexpr size_t kMinSecretBytes = 16;

// Reads a secret file: its bytes without trailing whitespace. Refuses a
// missing or short secret, and a file that other users may read.
absl::StatusOr<std::string> LoadSecretFile(const std::string& path);

// kNonceBytes from the system's CSPRNG.
std::string NewNonce();

std::string ClientProof(std::string_view secret, std::string_view client_nonce,
                        std::string_view server_nonce);
std::string ServerProof(std::string_view secret, std::string_view client_nonce,
                        std::string_view server_nonce);
// Compares in constant time.
bool ProofMatches(std::string_view expected, std::string_view got);

}  // namespace sroute

#endif  // SROUTE_RPC_HANDSHAKE_H_
