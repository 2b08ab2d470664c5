#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterUnaryKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
