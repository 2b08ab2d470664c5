#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterResizeKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
