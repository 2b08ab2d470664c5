#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterShapeKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
