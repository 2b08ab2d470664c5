#include "backends/cpu/kernels/util.h"

namespace kiln::cpu {

void RegisterPoolKernels(KernelRegistry& r) {}

}  // namespace kiln::cpu
