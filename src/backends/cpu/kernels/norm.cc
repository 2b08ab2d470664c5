#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterNormKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
