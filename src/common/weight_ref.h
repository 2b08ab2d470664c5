// One external weight: where its bytes are and what they hold.
//
// The one type for a FileConstant's reference, used by the store (what
// StoreWeights and ReadMeta return), the compiler (what ExternalizeConstants
// writes into FileConstant nodes), the loader (what the WeightManager
// resolves) and the tools (ListExternalWeights). Its encoding as FileConstant
// attributes is ops/file_constant.h, in one place.
#pragma once

#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace kiln::weights {

struct WeightRef {
  WeightRef() = default;  // (not an aggregate: fields are set by name)
  std::string node;      // the FileConstant node / value name (messages); empty in the store
  // Exactly one of the two below is set in a FileConstant:
  std::string location;  // weight_<sha256> or <model>_weight_combined, relative to the weight directory
  std::string file_id;   // graph-API weight, resolved at load by LoadOptions::weight_files
  std::uint64_t offset = 0;
  std::uint64_t length = 0;  // bytes
  DType dtype = DType::kUndefined;  // kUndefined in the store (it keeps bytes)
  Shape shape;
  std::string sha256;    // hex digest of the bytes; may be empty (file_id weights)
};

inline constexpr const char* kCombinedSuffix = "_weight_combined";
inline constexpr std::size_t kMaxModelNameBytes = 128;

// Names (src/common/weight_names.cc; in the core library, for the FileConstant
// decoder):
bool IsSha256Hex(const std::string& s);  // 64 lowercase hex digits
// Why `name` cannot be a model name (it names <name>_weight_combined), or "".
std::string ModelNameProblem(const std::string& name);
bool IsSingleName(const std::string& f);    // weight_<sha256>
bool IsCombinedName(const std::string& f);  // <valid model name>_weight_combined
// The only file names a weight location may have.
bool IsWeightFileName(const std::string& name);

}  // namespace kiln::weights
