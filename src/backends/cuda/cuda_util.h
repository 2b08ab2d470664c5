// Small helpers of the CUDA backend: CUDA errors as Kiln Status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace kiln::cuda {

// "13.0" from CUDA's 13000.
inline std::string DescribeCudaVersion(int v) { return StrCat(v / 1000, ".", (v % 1000) / 10); }

// Ok, or an error naming the call, the device and CUDA's error.
inline Status CudaStatus(cudaError_t e, const char* what, const std::string& device) {
  if (e == cudaSuccess) return Status::Ok();
  return Error(StatusCode::kInternal, what, " on '", device, "' failed: ", cudaGetErrorName(e), " (",
               cudaGetErrorString(e), ")");
}

}  // namespace kiln::cuda
