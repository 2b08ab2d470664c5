#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterConvTransposeKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
