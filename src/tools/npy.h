// Minimal, strict .npy (NumPy format v1/v2/v3) reader and writer for the CLI.
#pragma once

#include <string>
#include <string_view>

#include "common/tensor.h"

namespace kiln::npy {

// Errors name the file and what is wrong (bad magic, unsupported dtype,
// Fortran order, truncated data).
Result<HostTensor> Load(const std::string& path);
// The same from bytes in memory (`what` names them in errors). Both parse the
// header with a hand-checked parser, check dtype x shape with the checked
// size helper and the file size against the header before allocating.
Result<HostTensor> Parse(std::string_view bytes, const std::string& what);
// Writes atomically (temporary name, then rename).
Status Save(const std::string& path, const HostTensor& t);

}  // namespace kiln::npy
