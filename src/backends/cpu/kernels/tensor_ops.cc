#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterTensorOpsKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
