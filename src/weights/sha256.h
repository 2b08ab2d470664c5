// SHA-256 through OpenSSL (SHA-NI where the CPU has it: ~1.4 GB/s here).
#pragma once

#include <cstddef>
#include <string>

namespace kiln::weights {

// 64 lowercase hex digits of SHA-256(data[0..size)).
std::string Sha256Hex(const void* data, std::size_t size);

// True for a well-formed 64-digit lowercase hex string.
bool IsSha256Hex(const std::string& s);

}  // namespace kiln::weights
