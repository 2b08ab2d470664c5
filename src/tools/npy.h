// Minimal, strict .npy (NumPy format v1/v2/v3) reader and writer for the CLI.
#pragma once

#include <string>

#include "common/tensor.h"

namespace kiln::npy {

// Errors name the file and what is wrong (bad magic, unsupported dtype,
// Fortran order, truncated data).
Result<HostTensor> Load(const std::string& path);
// Writes atomically (temporary name, then rename).
Status Save(const std::string& path, const HostTensor& t);

}  // namespace kiln::npy
