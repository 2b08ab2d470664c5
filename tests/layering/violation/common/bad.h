#include "runtime/executor.h"  // up: common may not use runtime
