// SHA-256 through OpenSSL (SHA-NI where the CPU has it: ~1.4 GB/s here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/weight_ref.h"  // IsSha256Hex

namespace kiln::weights {

// 64 lowercase hex digits of SHA-256(data[0..size)).
std::string Sha256Hex(const void* data, std::size_t size);

// True for a well-formed 64-digit lowercase hex string.

// SHA-256 of bytes [offset, offset + length) of an open file, read in
// chunks (no mapping: a file truncated meanwhile gives an error, not SIGBUS).
// Errors name `what` (the file).
Result<std::string> Sha256OfFileRange(int fd, std::uint64_t offset, std::uint64_t length, const std::string& what);

}  // namespace kiln::weights
