// The public header of the sample's custom-op package (installed under
// op_graph/include/): the op types it registers and the argument block its
// kernel reads.
#pragma once

namespace add_sample {

// z = x + y over float32 tensors of one shape. AddRefresh implements
// ArgsUpdater; AddNoRefresh does not.
inline constexpr const char* kAddRefresh = "AddRefresh";
inline constexpr const char* kAddNoRefresh = "AddNoRefresh";

// The argument block the kernel reads: three pointers and a count.
struct AddArgs {
  const float* x;
  const float* y;
  float* z;
  long n;
};

}  // namespace add_sample
