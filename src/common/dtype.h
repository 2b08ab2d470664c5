#pragma once
#include "kiln/dtype.h"  // IWYU pragma: export
