#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterReduceKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
