#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterConvTransposeOps(OpRegistry& r) {}

}  // namespace kiln::ops
