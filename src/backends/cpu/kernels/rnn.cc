#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterRnnKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
