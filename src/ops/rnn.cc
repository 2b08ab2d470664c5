#include "ops/common_infer.h"

namespace kiln::ops {

void RegisterRnnOps(OpRegistry& r) {}

}  // namespace kiln::ops
